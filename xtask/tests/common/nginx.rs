//! A real HTTP cache server for the tests: Debian's nginx with WebDAV `PUT`
//! (`bash .ci/setup` installs it), on a loopback port, serving a scratch
//! folder. Anyone may read; writing needs the login in [`Nginx::netrc`], as a
//! cache that pull requests read and only main writes would be set up.

use std::{
    fs,
    io::Read,
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub const USER: &str = "kiln-ci";
pub const PASSWORD: &str = "not-a-real-secret-4f1c";

pub struct Nginx {
    child: Child,
    pub dir: PathBuf,
    /// What the server stores (`<root>/kiln/cas/...`, `<root>/kiln/ac/...`).
    pub root: PathBuf,
    pub port: u16,
    /// A netrc file with the login that may write.
    pub netrc: PathBuf,
}

fn binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("nginx is not installed: run `bash .ci/setup` (apt-get install nginx: Debian's nginx has the WebDAV PUT module built in)")
    })
}

impl Nginx {
    /// Starts nginx on a free loopback port, serving `dir/root`.
    pub fn start(dir: &Path) -> Nginx {
        let root = dir.join("root");
        let tmp = dir.join("tmp");
        fs::create_dir_all(root.join("kiln")).unwrap();
        fs::create_dir_all(&tmp).unwrap();
        fs::write(dir.join("htpasswd"), format!("{USER}:{{PLAIN}}{PASSWORD}\n")).unwrap();
        let netrc = dir.join("netrc");
        fs::write(&netrc, format!("machine 127.0.0.1 login {USER} password {PASSWORD}\n")).unwrap();
        for attempt in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let d = dir.display();
            let conf = format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 64; }}\n\
                 http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
                 fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
                 client_max_body_size 0;\n\
                 server {{\n    listen 127.0.0.1:{port};\n    root {root};\n\
                 location / {{\n      dav_methods PUT;\n      create_full_put_path on;\n\
                 limit_except GET HEAD {{ auth_basic kiln; auth_basic_user_file {d}/htpasswd; }}\n    }}\n  }}\n}}\n",
                root = root.display()
            );
            let conf_file = dir.join("nginx.conf");
            fs::write(&conf_file, conf).unwrap();
            let child = Command::new(binary())
                .arg("-c")
                .arg(&conf_file)
                .arg("-e")
                .arg(dir.join("error.log"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut n = Nginx { child, dir: dir.to_path_buf(), root: root.clone(), port, netrc: netrc.clone() };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return n;
                }
                if let Ok(Some(_)) = n.child.try_wait() {
                    break; // the port was taken in between: try another
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut err = String::new();
            if let Some(mut e) = n.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            eprintln!("nginx did not start (attempt {attempt}): {err}{}", fs::read_to_string(dir.join("error.log")).unwrap_or_default());
        }
        panic!("nginx would not start on a loopback port");
    }

    /// The cache's URL (a prefix on the server, as a shared server would give each project).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/kiln", self.port)
    }

    /// The files the server stores: (`cas/<sha>` or `ac/<key>`, path).
    pub fn stored(&self) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        for area in ["cas", "ac"] {
            if let Ok(rd) = fs::read_dir(self.root.join("kiln").join(area)) {
                for e in rd.flatten() {
                    out.push((format!("{area}/{}", e.file_name().to_string_lossy()), e.path()));
                }
            }
        }
        out.sort();
        out
    }

    /// The requests the server answered, by method: (method, path, status).
    pub fn requests(&self) -> Vec<(String, String, u16)> {
        let log = fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| {
                let req = l.split('"').nth(1)?;
                let mut r = req.split_whitespace();
                let (method, path) = (r.next()?.to_string(), r.next()?.to_string());
                let status = l.split('"').nth(2)?.split_whitespace().next()?.parse().ok()?;
                Some((method, path, status))
            })
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
