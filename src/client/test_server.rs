//! A scripted HTTP server on loopback that plays the JobManager's REST API for the client's
//! tests: one canned answer per connection, in order, each request reported.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use crate::client::endpoint::{Endpoint, EndpointSource, JobManagerUrl};
use crate::client::rest::RestClient;

/// A request as the server saw it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub line: String,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub body: String,
}

/// Serves one canned answer per connection, in order, and reports each request it read.
pub(crate) struct Server {
    url: JobManagerUrl,
    seen: mpsc::Receiver<Seen>,
}

impl Server {
    /// Serves `answers` (status, JSON body), one per connection, in order.
    pub fn start<B: Into<String>>(answers: Vec<(u16, B)>) -> Self {
        let answers: Vec<(u16, String)> = answers.into_iter().map(|(s, b)| (s, b.into())).collect();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let (tx, seen) = mpsc::channel();
        #[allow(clippy::disallowed_methods)] // a test thread plays the JobManager
        std::thread::spawn(move || {
            for (status, body) in answers {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let (mut authorization, mut content_type, mut length) = (None, None, 0);
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    let (name, value) = header.split_once(": ").unwrap();
                    match name.to_ascii_lowercase().as_str() {
                        "authorization" => authorization = Some(value.to_owned()),
                        "content-type" => content_type = Some(value.to_owned()),
                        "content-length" => length = value.parse().unwrap(),
                        _ => {}
                    }
                }
                let mut request_body = vec![0; length];
                reader.read_exact(&mut request_body).unwrap();
                let _ = tx.send(Seen {
                    line: line.trim_end().to_owned(),
                    authorization,
                    content_type,
                    body: String::from_utf8(request_body).unwrap(),
                });
                let mut stream = stream;
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
        });
        Self { url, seen }
    }

    /// A client of this server, sending `token` if given.
    pub fn client(&self, token: Option<&str>) -> RestClient {
        RestClient::new(Endpoint {
            url: self.url.clone(),
            source: EndpointSource::Flag,
            token: token.map(str::to_owned),
        })
    }

    /// The next request the server read (waits up to 10 s).
    pub fn next(&self) -> Seen {
        self.seen
            .recv_timeout(Duration::from_secs(10))
            .expect("the client sent a request")
    }
}
