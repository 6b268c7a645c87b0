//! Tiny loopback HTTP servers (std only) for hostile and recording cases.

#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
};

/// What a server saw: each request's head (request line and headers).
pub type Seen = Arc<Mutex<Vec<String>>>;

/// Serves every connection on 127.0.0.1 with `answer(head, stream)`; its
/// base URL (`http://127.0.0.1:PORT`) and the heads it saw.
pub fn serve(answer: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let answer = Arc::new(answer);
    let log = seen.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (answer, log) = (answer.clone(), log.clone());
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                log.lock().unwrap().push(head.clone());
                answer(&head, &mut stream);
            });
        }
    });
    (url, seen)
}

/// The path of a request head's first line.
pub fn path(head: &str) -> &str {
    head.split_whitespace().nth(1).unwrap_or("/")
}

pub fn reply(stream: &mut TcpStream, status: &str, headers: &str, body: &[u8]) {
    let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n", body.len());
    let _ = stream.write_all(body);
}

pub fn options() -> kiln_http::Options {
    let mut o = kiln_http::Options::new("kiln-test");
    o.connect = std::time::Duration::from_secs(5);
    o.stall = std::time::Duration::from_secs(5);
    o.total = std::time::Duration::from_secs(60);
    o
}
