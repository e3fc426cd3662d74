//! Where a component's stdout and stderr go (docs/reference/capsules.md#component-capsules:
//! `logs/bootstrap.log`).
//!
//! Both streams of a task write into one [`OutputSink`]; each task may write at most
//! [`Limits::output_bytes`](super::Limits::output_bytes), after which one marker line is written
//! and the rest is dropped, so a chatty capsule cannot fill the disk.

use crate::sync::lock;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// A shared destination for component output. Cloning shares the destination.
#[derive(Clone)]
pub struct OutputSink {
    dest: Option<Arc<Mutex<Box<dyn Write + Send>>>>,
}

impl std::fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.dest.is_some() {
            "OutputSink(writer)"
        } else {
            "OutputSink(discard)"
        })
    }
}

impl Default for OutputSink {
    fn default() -> Self {
        OutputSink::discard()
    }
}

impl OutputSink {
    /// Drops everything the component writes.
    pub fn discard() -> OutputSink {
        OutputSink { dest: None }
    }

    /// Appends to a writer, e.g. `logs/bootstrap.log` opened for append.
    pub fn writer(w: impl Write + Send + 'static) -> OutputSink {
        OutputSink {
            dest: Some(Arc::new(Mutex::new(Box::new(w)))),
        }
    }

    /// Keeps the output in memory; the returned handle reads it (tests, diagnostics).
    pub fn memory() -> (OutputSink, MemoryOutput) {
        let buf = MemoryOutput::default();
        (OutputSink::writer(buf.clone()), buf)
    }

    /// The per-task view: one shared byte budget for stdout and stderr.
    pub(crate) fn for_task(&self, cap: u64) -> TaskOutput {
        TaskOutput {
            sink: self.clone(),
            budget: Arc::new(Mutex::new(Budget {
                left: cap,
                cap,
                cut: false,
            })),
        }
    }

    fn write_all(&self, bytes: &[u8]) {
        if let Some(dest) = &self.dest {
            let mut w = lock(dest);
            // Output is best effort: a full disk must not fail the task.
            let _ = w.write_all(bytes);
            let _ = w.flush();
        }
    }
}

/// In-memory output, readable while and after tasks run.
#[derive(Clone, Default)]
pub struct MemoryOutput(Arc<Mutex<Vec<u8>>>);

impl MemoryOutput {
    /// Everything written so far, decoded lossily.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }
}

impl Write for MemoryOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Budget {
    left: u64,
    cap: u64,
    cut: bool,
}

/// The stdout/stderr handed to one task's WASI context.
#[derive(Clone)]
pub(crate) struct TaskOutput {
    sink: OutputSink,
    budget: Arc<Mutex<Budget>>,
}

impl TaskOutput {
    fn write(&self, buf: &[u8]) {
        let mut b = lock(&self.budget);
        if b.cut {
            return;
        }
        let take = usize::try_from(b.left).unwrap_or(usize::MAX).min(buf.len());
        self.sink.write_all(&buf[..take]);
        b.left -= take as u64;
        if take < buf.len() {
            b.cut = true;
            let marker = format!("\n[capsule output cut at {} bytes for this task]\n", b.cap);
            self.sink.write_all(marker.as_bytes());
        }
    }
}

impl IsTerminal for TaskOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TaskOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for TaskOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        // Writes are short appends to a local file; doing them inline is what wasmtime's own
        // `OutputFile` does.
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_task_and_marks_the_cut_once() {
        let (sink, mem) = OutputSink::memory();
        let t = sink.for_task(5);
        t.write(b"abc");
        t.write(b"defg");
        t.write(b"more");
        assert_eq!(mem.text(), "abcde\n[capsule output cut at 5 bytes for this task]\n");
        // A new task starts with a fresh budget on the same sink.
        sink.for_task(5).write(b"xy");
        assert!(mem.text().ends_with("task]\nxy"));
    }

    #[test]
    fn discard_writes_nothing() {
        OutputSink::discard().for_task(10).write(b"abc");
    }
}
