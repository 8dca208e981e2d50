//! A server child process: spawned so it dies with us, logged to a file, stopped by PID.

use crate::{Error, Result};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How many ports a server tries before giving up (a collision needs another process
/// to bind the very port we probed in the few milliseconds before the server does).
const PORT_ATTEMPTS: usize = 5;

/// Prefix of every temporary directory this crate creates.
const DIR_PREFIX: &str = "stock-locks-testbed-";

/// Finds an executable in `PATH` or the usual system directories (`/usr/sbin` is not in
/// every user's `PATH`, and `mariadbd` lives there).
pub fn find_binary(name: &str, package: &'static str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| Error::MissingBinary {
            what: format!("`{name}`"),
            package,
        })
}

/// Asks the kernel for a free loopback port. Free *now*: the server may still lose it
/// to another process before it binds, which `with_port_retry` (inside the testbed) handles.
pub fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(Error::io("probing for a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(Error::io("probing for a free port"))?
        .port())
}

/// Runs `start` with a free port (first `preferred`, if given) until it does not fail
/// with [`Error::PortInUse`]. Returns the value and the number of attempts made.
pub(crate) fn with_port_retry<T>(
    preferred: Option<u16>,
    mut start: impl FnMut(u16) -> Result<T>,
) -> Result<(T, usize)> {
    let mut last = None;
    for attempt in 1..=PORT_ATTEMPTS {
        let port = match (attempt, preferred) {
            (1, Some(port)) => port,
            _ => free_port()?,
        };
        match start(port) {
            Ok(value) => return Ok((value, attempt)),
            Err(e @ Error::PortInUse { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

/// Runs `start` again (on fresh ports it picks itself) while it fails with
/// [`Error::PortInUse`], at most `attempts` times: for a cluster whose members all
/// pick their ports before any of them binds.
pub(crate) fn retry_on_port_in_use<T>(
    attempts: usize,
    mut start: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut last = None;
    for _ in 0..attempts {
        match start() {
            Err(e @ Error::PortInUse { .. }) => last = Some(e),
            other => return other,
        }
    }
    Err(last.expect("at least one attempt"))
}

/// A private temporary directory for one server, removed on drop.
///
/// It records our PID in `owner.pid`, so directories left behind by a process that was
/// killed with SIGKILL (no destructor ran) are removed by the next one that starts.
pub struct ServerDir {
    dir: tempfile::TempDir,
}

impl ServerDir {
    pub fn new(server: &str) -> Result<ServerDir> {
        remove_stale_dirs();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{server}-"))
            .tempdir()
            .map_err(Error::io(format!(
                "{server}: creating its temporary directory"
            )))?;
        fs::write(dir.path().join("owner.pid"), std::process::id().to_string())
            .map_err(Error::io(format!("{server}: writing owner.pid")))?;
        Ok(ServerDir { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let Ok(owner) = fs::read_to_string(entry.path().join("owner.pid")) else {
            continue;
        };
        let alive = Path::new("/proc").join(owner.trim()).exists();
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A running server: its child process and the file its output goes to.
///
/// Dropping it kills the process (SIGKILL) and waits for it, so no zombie and no
/// orphan is left. Test data is disposable, so there is no graceful shutdown to wait
/// for (MariaDB takes ~2 s to stop on SIGTERM).
pub struct ServerProcess {
    name: String,
    child: Child,
    /// What was run, to run it again ([`ServerProcess::respawn`]).
    program: PathBuf,
    args: Vec<String>,
    /// Extra environment variables (e.g. an `LD_PRELOAD`).
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The log's length when this process started: earlier lines belong to an
    /// earlier attempt (a port collision) or an earlier run of the same server.
    log_start: u64,
}

impl ServerProcess {
    /// Spawns `program args` with stdout and stderr appended to `log`.
    ///
    /// The child gets `PR_SET_PDEATHSIG(SIGKILL)`: when the thread that spawned it
    /// exits (normally, by panic, or because the whole process was SIGKILLed) the kernel
    /// kills the server too. It is put in its own process group so that a terminal's
    /// Ctrl-C does not stop it behind its owner's back.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<ServerProcess> {
        Self::spawn_with_env(name, program, args, &[], log)
    }

    /// [`ServerProcess::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: PathBuf,
    ) -> Result<ServerProcess> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(Error::io(format!(
                "{name}: opening its log {}",
                log.display()
            )))?;
        let err = out
            .try_clone()
            .map_err(Error::io(format!("{name}: opening its log")))?;
        let log_start = out.metadata().map(|m| m.len()).unwrap_or(0);
        let parent = std::process::id() as libc::pid_t;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls (prctl, getppid, _exit).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then nobody would
                // ever kill us, so give up now.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(Error::io(format!("{name}: spawning {}", program.display())))?;
        Ok(ServerProcess {
            name: name.to_string(),
            child,
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: env.to_vec(),
            log,
            log_start,
        })
    }

    /// The server's name, as used in errors (`mariadb`, `redis-2`, `zookeeper-1`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's process id: for tests that pause (SIGSTOP), kill or inspect it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the server's output goes.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether the process has not exited yet (a stopped process is still running).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the server with SIGKILL and reaps it (a crash: no shutdown, no flush).
    /// Idempotent.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freezes the server with SIGSTOP: it keeps its sockets (clients can still
    /// connect, the kernel queues their bytes) but answers nothing, like a process in
    /// a long GC pause. [`ServerProcess::resume`] lets it go on.
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// Sends a signal to the server.
    pub fn signal(&self, signal: libc::c_int) -> Result<()> {
        // SAFETY: kill(2) on our own child's pid.
        if unsafe { libc::kill(self.child.id() as libc::pid_t, signal) } == 0 {
            Ok(())
        } else {
            Err(Error::Io {
                context: format!("{}: sending signal {signal}", self.name),
                source: std::io::Error::last_os_error(),
            })
        }
    }

    /// Replaces the arguments the next [`ServerProcess::respawn`] runs with.
    pub fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    /// The arguments it runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Replaces the extra environment the next [`ServerProcess::respawn`] runs with.
    pub fn set_env(&mut self, env: Vec<(String, String)>) {
        self.env = env;
    }

    /// Kills the server (if it runs) and starts the same command again, with the same
    /// data directory and port. The caller waits for readiness (it knows the protocol).
    /// Call it from a long-lived thread (see [`ServerProcess::spawn`]).
    pub fn respawn(&mut self) -> Result<()> {
        self.kill();
        // A paused process cannot die before it is continued.
        let _ = self.resume();
        *self = ServerProcess::spawn_with_env(
            &self.name,
            &self.program,
            &self.args,
            &self.env,
            self.log.clone(),
        )?;
        Ok(())
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Polls `ready` until it answers true. Fails when the process exits first (as a
    /// [`Error::PortInUse`] when its log says the port was taken) or after `timeout`.
    pub(crate) fn wait_ready(
        &mut self,
        port: u16,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = self.child.try_wait().ok().flatten();
            if self.log_says_port_in_use() {
                self.kill();
                return Err(Error::PortInUse {
                    server: self.name.clone(),
                    port,
                });
            }
            if let Some(status) = exited {
                return Err(self.start_error(format!("exited with {status} before it was ready")));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(self.start_error(format!("not ready after {timeout:?}")));
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    pub(crate) fn start_error(&self, reason: String) -> Error {
        Error::Start {
            server: self.name.clone(),
            reason,
            log_tail: self.log_tail(30),
        }
    }

    fn log_says_port_in_use(&self) -> bool {
        let mut ours = String::new();
        if let Ok(mut file) = File::open(&self.log)
            && file.seek(SeekFrom::Start(self.log_start)).is_ok()
        {
            let _ = file.read_to_string(&mut ours);
        }
        // MariaDB and Redis say "Address already in use", etcd (Go) "address already in use".
        let ours = ours.to_lowercase();
        ours.contains("address already in use") || ours.contains("address in use")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a file (at most its last 64 KiB are read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut text = String::new();
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_ok() {
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs a short command to completion (an installer or a client), failing with its
/// output when it fails.
pub(crate) fn run_to_end(server: &str, program: &Path, args: &[String]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io(format!(
            "{server}: running {}",
            program.display()
        )))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::Start {
            server: server.to_string(),
            reason: format!(
                "`{} {}` failed with {}",
                program.display(),
                args.join(" "),
                output.status
            ),
            log_tail: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

/// Polls `done` every 20 ms until it answers true; fails after `timeout`, naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            return Err(Error::Command {
                what: format!("waiting for {what}"),
                output: format!("not within {timeout:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Sends `request` to a loopback TCP port and returns what the server answered before
/// closing or pausing, or `None` when nobody listens yet.
pub(crate) fn tcp_exchange(port: u16, request: &[u8], read_until: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    use std::net::TcpStream;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    if !request.is_empty() {
        stream.write_all(request).ok()?;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if read_until.is_empty()
                    || answer.windows(read_until.len()).any(|w| w == read_until)
                {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(name: &str, script: &str, dir: &ServerDir) -> ServerProcess {
        let sh = find_binary("sh", "dash").unwrap();
        ServerProcess::spawn(
            name,
            &sh,
            &["-c".into(), script.into()],
            dir.path().join("log"),
        )
        .unwrap()
    }

    /// A server that exits before it is ready is reported by name, with its log.
    #[test]
    fn an_early_exit_names_the_server_and_shows_its_log() {
        let dir = ServerDir::new("fake").unwrap();
        let mut process = sh(
            "fake-server",
            "echo 'fatal: config is broken' >&2; exit 3",
            &dir,
        );
        let err = process
            .wait_ready(1, Duration::from_secs(5), || false)
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("fake-server did not start"), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("fatal: config is broken"), "{text}");
    }

    /// "Address already in use" in this attempt's log is a port collision (retried),
    /// but the same words left in the log by an earlier attempt are not.
    #[test]
    fn a_port_collision_is_recognised_in_this_attempts_log_only() {
        let dir = ServerDir::new("fake").unwrap();
        let mut first = sh("fake", "echo 'bind: Address already in use'; exit 1", &dir);
        let err = first
            .wait_ready(4242, Duration::from_secs(5), || false)
            .unwrap_err();
        assert!(matches!(err, Error::PortInUse { port: 4242, .. }), "{err}");

        let mut second = sh("fake", "sleep 30", &dir);
        let mut polls = 0;
        second
            .wait_ready(4243, Duration::from_secs(5), || {
                polls += 1;
                polls > 2
            })
            .expect("an old collision in the log is not this attempt's");
        let pid = second.pid();
        drop(second);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "killed and reaped on drop"
        );
    }

    /// A server that never answers is given up on after the timeout, and killed.
    #[test]
    fn a_server_that_never_becomes_ready_times_out() {
        let dir = ServerDir::new("fake").unwrap();
        let mut process = sh("sleepy", "sleep 30", &dir);
        let err = process
            .wait_ready(1, Duration::from_millis(200), || false)
            .unwrap_err();
        assert!(err.to_string().contains("not ready after"), "{err}");
        assert!(!process.is_running(), "killed after the timeout");
    }
}
