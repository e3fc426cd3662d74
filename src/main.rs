// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

fn main() -> std::process::ExitCode {
    mur::cli::main()
}
