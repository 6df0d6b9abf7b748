//! The WebSocket frames a client sends, read as they stream past the guard: each frame's header
//! is checked before any of its payload is forwarded, so a frame over the limit never reaches
//! the server (RFC 6455, section 5.2).

use std::fmt;

/// Why a client's stream is cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A message (the sum of its fragments) longer than the limit.
    TooLong {
        /// Its length so far, as its headers declare it.
        declared: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A frame that breaks the protocol: unmasked, reserved bits or opcodes, a control frame
    /// fragmented or over 125 bytes, a continuation with no message to continue, or a new
    /// message inside a fragmented one.
    Malformed(&'static str),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::TooLong { declared, limit } => {
                write!(f, "a message of {declared} bytes, over the limit of {limit}")
            }
            Violation::Malformed(why) => write!(f, "a malformed WebSocket frame: {why}"),
        }
    }
}

/// What one call to [`Frames::feed`] let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// How many of the bytes given may be forwarded.
    pub consumed: usize,
    /// Whether those bytes end a data message; reading stops there so the caller can act first.
    pub message_ended: bool,
}

/// Where the reader is within the stream.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Collecting a header: the bytes so far.
    Header { bytes: [u8; 14], have: usize },
    /// Inside a payload: how many bytes are left, and whether it ends a data message.
    Payload { left: u64, ends_message: bool },
}

/// The client-to-server frame stream of one connection.
#[derive(Clone, Debug)]
pub struct Frames {
    at: At,
    limit: u64,
    /// The length of the data message being received, if one is open (fragments so far).
    message: Option<u64>,
}

impl Frames {
    /// A stream in which no message may be longer than `limit` bytes.
    pub fn new(limit: u64) -> Frames {
        Frames { at: At::Header { bytes: [0; 14], have: 0 }, limit, message: None }
    }

    /// Changes the limit for the frames whose headers are still to come.
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Reads `bytes`, the next bytes of the stream: how many may be forwarded, stopping just
    /// after the end of a data message; or the violation, found at the header that declares it,
    /// before any of that frame's payload.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, Violation> {
        let mut used = 0;
        while used < bytes.len() {
            match &mut self.at {
                At::Header { bytes: header, have } => {
                    header[*have] = bytes[used];
                    *have += 1;
                    used += 1;
                    if let Some(frame) = parse_header(&header[..*have])? {
                        let ends_message = self.admit(frame)?;
                        self.at = At::Payload { left: frame.len, ends_message };
                    }
                }
                At::Payload { left, .. } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len() - used);
                    used += take;
                    *left -= take as u64;
                }
            }
            if let At::Payload { left: 0, ends_message } = self.at {
                self.at = At::Header { bytes: [0; 14], have: 0 };
                if ends_message {
                    return Ok(Fed { consumed: used, message_ended: true });
                }
            }
        }
        Ok(Fed { consumed: used, message_ended: false })
    }

    /// Checks a complete header against the stream so far: whether its payload ends a message.
    fn admit(&mut self, frame: Header) -> Result<bool, Violation> {
        if frame.opcode >= 8 {
            if !frame.fin {
                return Err(Violation::Malformed("a fragmented control frame"));
            }
            if frame.len > 125 {
                return Err(Violation::Malformed("a control frame over 125 bytes"));
            }
            return Ok(false);
        }
        let so_far = match (frame.opcode, self.message) {
            (0, Some(so_far)) => so_far,
            (0, None) => return Err(Violation::Malformed("a continuation of no message")),
            (_, Some(_)) => return Err(Violation::Malformed("a new message inside another")),
            (_, None) => 0,
        };
        let declared = so_far.saturating_add(frame.len);
        if declared > self.limit {
            return Err(Violation::TooLong { declared, limit: self.limit });
        }
        self.message = (!frame.fin).then_some(declared);
        Ok(frame.fin)
    }
}

/// What a frame's header says.
#[derive(Clone, Copy, Debug)]
struct Header {
    fin: bool,
    opcode: u8,
    len: u64,
}

/// The header in `bytes` once they hold all of it; `None` while more are needed.
fn parse_header(bytes: &[u8]) -> Result<Option<Header>, Violation> {
    if bytes.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (bytes[0], bytes[1]);
    if b0 & 0x70 != 0 {
        return Err(Violation::Malformed("reserved bits set (no extension was agreed)"));
    }
    let opcode = b0 & 0x0f;
    if !matches!(opcode, 0 | 1 | 2 | 8 | 9 | 10) {
        return Err(Violation::Malformed("a reserved opcode"));
    }
    if b1 & 0x80 == 0 {
        return Err(Violation::Malformed("an unmasked frame from a client"));
    }
    let (extra, short) = match b1 & 0x7f {
        126 => (2, None),
        127 => (8, None),
        n => (0, Some(u64::from(n))),
    };
    let need = 2 + extra + 4;
    if bytes.len() < need {
        return Ok(None);
    }
    let len = match short {
        Some(n) => n,
        None => {
            let mut be = [0u8; 8];
            be[8 - extra..].copy_from_slice(&bytes[2..2 + extra]);
            let n = u64::from_be_bytes(be);
            if n >> 63 != 0 {
                return Err(Violation::Malformed("a length with its top bit set"));
            }
            n
        }
    };
    Ok(Some(Header { fin: b0 & 0x80 != 0, opcode, len }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame (the mask is zero: the guard never unmasks).
    pub(crate) fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![u8::from(fin) << 7 | opcode];
        match payload.len() {
            n @ 0..=125 => f.push(0x80 | n as u8),
            n @ 126..=65535 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&[0; 4]);
        f.extend_from_slice(payload);
        f
    }

    /// Feeds `bytes` in pieces of `step`, forwarding everything, and counts the message ends.
    fn feed_all(frames: &mut Frames, bytes: &[u8], step: usize) -> Result<usize, Violation> {
        let mut ends = 0;
        let mut rest = bytes;
        while !rest.is_empty() {
            let piece = &rest[..step.min(rest.len())];
            let fed = frames.feed(piece)?;
            ends += usize::from(fed.message_ended);
            rest = &rest[fed.consumed..];
        }
        Ok(ends)
    }

    #[test]
    fn messages_are_counted_whatever_the_read_sizes() {
        let mut stream = frame(true, 2, &[7; 300]);
        stream.extend(frame(true, 9, b"ping"));
        stream.extend(frame(false, 2, &[1; 10]));
        stream.extend(frame(true, 10, b""));
        stream.extend(frame(true, 0, &[2; 70000]));
        stream.extend(frame(true, 2, b""));
        for step in [1, 2, 3, 7, 64, 1 << 20] {
            assert_eq!(feed_all(&mut Frames::new(1 << 20), &stream, step), Ok(3), "step {step}");
        }
    }

    #[test]
    fn reading_stops_right_after_a_message_ends() {
        let mut stream = frame(true, 2, b"init");
        let first = stream.len();
        stream.extend(frame(true, 2, b"more"));
        let fed = Frames::new(64).feed(&stream).unwrap();
        assert_eq!(fed, Fed { consumed: first, message_ended: true });
    }

    #[test]
    fn a_message_over_the_limit_is_refused_at_its_header() {
        let mut f = Frames::new(100);
        let header = &frame(true, 2, &[0; 101])[..8];
        assert_eq!(f.feed(header), Err(Violation::TooLong { declared: 101, limit: 100 }));
        // A 300 MB frame is refused from its 14 header bytes alone.
        let mut f = Frames::new(1 << 20);
        let mut header = vec![0x82, 0x80 | 127];
        header.extend_from_slice(&300_000_000u64.to_be_bytes());
        header.extend_from_slice(&[0; 4]);
        assert!(matches!(f.feed(&header), Err(Violation::TooLong { declared: 300_000_000, .. })));
    }

    #[test]
    fn fragments_count_towards_their_message() {
        let mut stream = frame(false, 2, &[0; 60]);
        stream.extend(frame(true, 0, &[0; 60]));
        let e = feed_all(&mut Frames::new(100), &stream, 5).unwrap_err();
        assert_eq!(e, Violation::TooLong { declared: 120, limit: 100 });
        assert_eq!(feed_all(&mut Frames::new(120), &stream, 5), Ok(1));
    }

    #[test]
    fn a_new_limit_applies_to_the_next_header() {
        let mut f = Frames::new(10);
        assert!(f.feed(&frame(true, 2, &[0; 11])).is_err());
        let mut f = Frames::new(10);
        assert_eq!(feed_all(&mut f, &frame(true, 2, &[0; 10]), 3), Ok(1));
        f.set_limit(1000);
        assert_eq!(feed_all(&mut f, &frame(true, 2, &[0; 500]), 3), Ok(1));
    }

    #[test]
    fn frames_that_break_the_protocol_are_refused() {
        let unmasked = [0x82, 0x01, 0xff];
        let cases: [(&[u8], &str); 7] = [
            (&unmasked, "unmasked"),
            (&[0xc2, 0x80], "reserved bits"),
            (&[0x83, 0x80], "reserved opcode"),
            (&[0x09, 0x80, 0, 0, 0, 0], "fragmented control"),
            (&[0x89, 0xfe, 0, 126, 0, 0, 0, 0], "control frame over 125"),
            (&[0x80, 0x80, 0, 0, 0, 0], "continuation of no message"),
            (&[0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "top bit"),
        ];
        for (bytes, want) in cases {
            let e = Frames::new(1 << 30).feed(bytes).unwrap_err().to_string();
            assert!(e.contains(want), "{bytes:?}: {e}");
        }
        let mut f = Frames::new(100);
        f.feed(&frame(false, 2, b"a")).unwrap();
        let e = f.feed(&frame(true, 2, b"b")).unwrap_err().to_string();
        assert!(e.contains("inside another"), "{e}");
    }
}
