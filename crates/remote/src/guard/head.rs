//! The HTTP request that opens a connection: only a WebSocket upgrade to burn-remote's session
//! route passes; everything else is answered by the guard and closed.

/// The most bytes a request head may take.
pub const MAX_HEAD: usize = 8 * 1024;

/// The only route a client of Switchyard uses: one WebSocket per session.
const SESSION: &str = "/session";

/// What the guard makes of the bytes received so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Not all of the head yet.
    Partial,
    /// An upgrade to the session route whose head is the first `len` bytes.
    Session {
        /// The length of the head, up to and including its blank line.
        len: usize,
    },
    /// Anything else, with the answer it gets before the connection closes.
    Refused(Refusal),
}

/// A request the guard refuses, by the status it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 400: not HTTP/1.1, or not a WebSocket upgrade.
    BadRequest,
    /// 404: a route other than the session's (burn-remote's `/data`, which serves tensors to
    /// other servers, included: Switchyard's clients never use it).
    NotFound,
    /// 405: a method other than GET.
    MethodNotAllowed,
    /// 431: a head longer than [`MAX_HEAD`].
    TooLarge,
    /// 503: the server holds as many connections as it allows.
    Busy,
}

impl Refusal {
    /// The whole response, which also tells the client the connection closes.
    pub fn response(self) -> &'static [u8] {
        match self {
            Refusal::BadRequest => {
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            }
            Refusal::NotFound => {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            }
            Refusal::MethodNotAllowed => {
                b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\nContent-Length: 0\r\n\
                  Connection: close\r\n\r\n"
            }
            Refusal::TooLarge => {
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\
                  Connection: close\r\n\r\n"
            }
            Refusal::Busy => {
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\
                  Connection: close\r\n\r\n"
            }
        }
    }

    /// What the log says about it.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::BadRequest => "not a WebSocket upgrade",
            Refusal::NotFound => "a route other than /session",
            Refusal::MethodNotAllowed => "a method other than GET",
            Refusal::TooLarge => "a request head over 8 KiB",
            Refusal::Busy => "the connection limit was reached",
        }
    }
}

/// Reads the start of a connection: the request head, once complete, and whether it passes.
pub fn request(bytes: &[u8]) -> Request {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => return Request::Partial,
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            return Request::Refused(Refusal::TooLarge);
        }
        Err(_) => return Request::Refused(Refusal::BadRequest),
    };
    if len > MAX_HEAD {
        return Request::Refused(Refusal::TooLarge);
    }
    if req.version != Some(1) {
        return Request::Refused(Refusal::BadRequest);
    }
    if req.method != Some("GET") {
        return Request::Refused(Refusal::MethodNotAllowed);
    }
    if req.path != Some(SESSION) {
        return Request::Refused(Refusal::NotFound);
    }
    let upgrade = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("upgrade") && h.value.eq_ignore_ascii_case(b"websocket")
    });
    if !upgrade {
        return Request::Refused(Refusal::BadRequest);
    }
    Request::Session { len }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPGRADE: &str = "GET /session HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nConnection: Upgrade\r\n\
                           Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                           Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

    #[test]
    fn a_session_upgrade_passes_once_complete() {
        let bytes = UPGRADE.as_bytes();
        for cut in [0, 1, 10, bytes.len() - 1] {
            assert_eq!(request(&bytes[..cut]), Request::Partial, "cut at {cut}");
        }
        assert_eq!(request(bytes), Request::Session { len: bytes.len() });
        // Bytes after the head (a client that does not wait for the answer) are not the head's.
        let mut more = bytes.to_vec();
        more.extend_from_slice(&[0x82, 0x80]);
        assert_eq!(request(&more), Request::Session { len: bytes.len() });
    }

    #[test]
    fn everything_else_is_refused_with_its_status() {
        let refused = |s: &str| match request(s.as_bytes()) {
            Request::Refused(r) => r,
            other => panic!("{s:?} gave {other:?}"),
        };
        assert_eq!(refused(&UPGRADE.replace("/session", "/data")), Refusal::NotFound);
        assert_eq!(refused(&UPGRADE.replace("/session", "/session/x")), Refusal::NotFound);
        assert_eq!(refused(&UPGRADE.replace("GET", "POST")), Refusal::MethodNotAllowed);
        assert_eq!(refused(&UPGRADE.replace("HTTP/1.1", "HTTP/1.0")), Refusal::BadRequest);
        assert_eq!(refused(&UPGRADE.replace("Upgrade: websocket\r\n", "")), Refusal::BadRequest);
        assert_eq!(refused("\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03"), Refusal::BadRequest);
        let long = format!("GET /session HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(refused(&long), Refusal::TooLarge);
        let many: String = (0..40).map(|i| format!("X{i}: 1\r\n")).collect();
        assert_eq!(refused(&format!("GET /session HTTP/1.1\r\n{many}\r\n")), Refusal::TooLarge);
    }

    #[test]
    fn every_response_is_complete_http() {
        for r in [
            Refusal::BadRequest,
            Refusal::NotFound,
            Refusal::MethodNotAllowed,
            Refusal::TooLarge,
            Refusal::Busy,
        ] {
            let mut headers = [httparse::EMPTY_HEADER; 8];
            let mut resp = httparse::Response::new(&mut headers);
            let status = resp.parse(r.response()).unwrap();
            assert_eq!(status, httparse::Status::Complete(r.response().len()), "{r:?}");
            assert!(resp.code.unwrap() >= 400);
        }
    }
}
