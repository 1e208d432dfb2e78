//! A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! commands on fd 3, replies on fd 4, each message NUL-terminated), so the browser tests need no
//! driver package and no network port.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The Chromium binary: `NUMPROBE_CHROMIUM`, else Debian's `/usr/bin/chromium` (`.ci/setup`).
pub fn chromium() -> PathBuf {
    std::env::var_os("NUMPROBE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// Events received so far, in order (method and params).
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

const WAIT: Duration = Duration::from_secs(60);

impl Browser {
    pub fn launch() -> Browser {
        let bin = chromium();
        assert!(
            bin.exists(),
            "{} is missing: the browser tests need Chromium (.ci/setup installs Debian's chromium)",
            bin.display()
        );
        let profile = tempfile::tempdir().expect("temporary profile directory");
        let (cmd_r, cmd_w) = std::io::pipe().expect("pipe");
        let (resp_r, resp_w) = std::io::pipe().expect("pipe");
        let cmd_r: OwnedFd = cmd_r.into();
        let resp_w: OwnedFd = resp_w.into();
        let (cr, rw) = (cmd_r.as_raw_fd(), resp_w.as_raw_fd());
        let mut command = Command::new(&bin);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--hide-scrollbars",
                "--window-size=1400,900",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec. The pipe
        // ends are first moved above fd 10 so that placing them on 3 and 4 cannot clobber one
        // with the other; dup2 leaves the new descriptors open across exec.
        unsafe {
            command.pre_exec(move || {
                let a = libc::fcntl(cr, libc::F_DUPFD, 10);
                let b = libc::fcntl(rw, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start chromium");
        drop(cmd_r);
        drop(resp_w);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(std::fs::File::from(OwnedFd::from(resp_r)));
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        let Ok(v) = serde_json::from_slice::<Value>(&buf) else {
                            continue;
                        };
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Browser {
            child,
            to: std::fs::File::from(OwnedFd::from(cmd_w)),
            from: rx,
            next_id: 1,
            session: None,
            events: Vec::new(),
            _profile: profile,
        }
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if session && let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no reply from chromium to {method}"));
            if v.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    /// A command to the attached page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Waits for an event (already received or coming) and returns its params.
    pub fn wait_event(&mut self, method: &str) -> Value {
        if let Some(pos) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(pos)["params"].clone();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium sent no {method}"));
            if v["method"] == method {
                return v["params"].clone();
            }
            self.events.push(v);
        }
    }

    /// Opens a blank page, watches its network and console, then loads `url`. Returns the
    /// milliseconds from navigation to the load event.
    pub fn open(&mut self, url: &str) -> f64 {
        let target = self.send("Target.createTarget", json!({"url": "about:blank"}), false);
        let attached = self.send(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
            false,
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        self.call("Page.enable", json!({}));
        self.call("Network.enable", json!({}));
        self.call("Runtime.enable", json!({}));
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        );
        self.events.clear();
        let start = Instant::now();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_event("Page.loadEventFired");
        start.elapsed().as_secs_f64() * 1000.0
    }

    /// Evaluates an expression in the page; its value (JSON), or a panic with the exception.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// A real mouse click at page coordinates.
    pub fn click(&mut self, x: f64, y: f64) {
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Clicks the centre of the first element `selector` names.
    pub fn click_selector(&mut self, selector: &str) {
        let r = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()",
            serde_json::to_string(selector).unwrap()
        ));
        let xy = r
            .as_array()
            .unwrap_or_else(|| panic!("nothing matches {selector}"));
        self.click(xy[0].as_f64().unwrap(), xy[1].as_f64().unwrap());
    }

    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(r["data"].as_str().unwrap());
        std::fs::write(path, png).expect("write screenshot");
    }

    /// URLs the page requested (every `Network.requestWillBeSent` seen so far).
    pub fn requests(&mut self) -> Vec<String> {
        // Drain what has arrived without waiting.
        while let Ok(v) = self.from.try_recv() {
            self.events.push(v);
        }
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .map(|e| {
                e["params"]["request"]["url"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    /// JavaScript exceptions the page threw so far.
    pub fn exceptions(&mut self) -> Vec<String> {
        while let Ok(v) = self.from.try_recv() {
            self.events.push(v);
        }
        self.events
            .iter()
            .filter(|e| e["method"] == "Runtime.exceptionThrown")
            .map(|e| e["params"]["exceptionDetails"].to_string())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.send_close();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn send_close(&mut self) -> std::io::Result<()> {
        let msg = b"{\"id\":999999,\"method\":\"Browser.close\",\"params\":{}}\0";
        self.to.write_all(msg)
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s.as_bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
