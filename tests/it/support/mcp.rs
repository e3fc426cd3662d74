//! The official MCP Python SDK's server (`tests/interop/mcp_server.py`) on 127.0.0.1, as a real
//! peer for `mur::tools::mcp`. The SDK is installed by the tests themselves, once, in a virtual
//! environment under `target/` (`python::python_with`: pinned, locked, reused across runs).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use super::python::python_with;

/// The SDK and the server that runs its Starlette app, pinned.
pub const MCP_SDK: &[&str] = &["mcp==2.3.0", "uvicorn==0.54.0"];

/// A running `mcp_server.py`; killed when dropped.
pub struct SdkServer {
    child: Child,
    /// Held open so a later write by the server cannot fail.
    _stdout: BufReader<ChildStdout>,
    port: u16,
    dir: tempfile::TempDir,
}

impl SdkServer {
    /// Starts the server requiring `Bearer <key>`, with `env` (`MCP_TEST_JSON`, `MCP_TEST_PAGE`,
    /// …) set. The key goes by environment, never argv.
    pub fn start(key: &str, env: &[(&str, &str)]) -> SdkServer {
        let python = python_with(MCP_SDK, "mcp.server.mcpserver, uvicorn");
        let dir = tempfile::Builder::new().prefix("mur-mcp-").tempdir().expect("tempdir");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let mut child = Command::new(python)
            .arg(super::repo_root().join("tests/interop/mcp_server.py"))
            // Not the repository: nothing there may shadow the SDK's modules.
            .current_dir(dir.path())
            .env("MCP_TEST_KEY", key)
            .env("MCP_TEST_LOG", dir.path().join("requests.log"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn the MCP SDK server");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
            panic!("the MCP SDK server printed no port ({line:?}):\n{err}");
        };
        SdkServer {
            child,
            _stdout: stdout,
            port,
            dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/mcp`: the SDK's Streamable HTTP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Every line the server logged so far (`http <method>`, `auth <value>`, `call <name>`).
    pub fn log(&self) -> Vec<String> {
        read_log(&self.dir.path().join("requests.log"))
    }

    /// What the server wrote on stderr (for a failing test's message).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_log(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
