//! Integration tests: the real `mur` binary, real processes, real sockets on 127.0.0.1.
//!
//! One test binary (modules below) keeps link time down; each area has its own file.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

mod support;

mod a2a;
mod admission;
mod answer;
mod artifacts;
mod asking;
mod bounds;
mod budget;
mod calls;
mod capsules;
mod checkup;
mod compiled;
mod containers;
mod demo;
mod deploy;
mod door;
mod environment;
mod faults;
mod finding;
mod firsthour;
mod formation;
mod frontend;
mod grants;
mod guards;
mod hostile;
mod languages;
mod layers;
mod load;
mod loopback;
mod mcp;
mod mcp_tasks;
mod model;
mod nemesis;
mod newcomer;
mod otel;
mod promises;
mod providers;
mod push;
mod records;
mod reference;
mod remote;
mod restarts;
mod send;
mod session;
mod streaming;
mod takeover;
mod terminal;
mod tools;
mod ui;
mod ui_act;
mod usage;
mod wear;
