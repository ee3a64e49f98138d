//! Answers sent while they are being written.
//!
//! At datacenter scale the full step summary runs to megabytes (about 8 MB at 5000
//! servers). Rather than holding it whole next to the request it describes, the blocking
//! thread that writes it hands it over in parts of about [`PART_BYTES`] through a small
//! bounded channel, and the connection sends each part as it comes: memory stays at a few
//! parts, and the client reads the start of the answer while the rest is written. The
//! writers offer a part every few tens of KB (`ENTRIES_PER_PART_CHECK`), so a part stays
//! within [`PART_ROOM`] and its buffer never grows: at 5,000 servers the answer's parts
//! took 4 MiB at the request's peak when a step was written whole.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body as HttpBody, Frame};
use tokio::sync::mpsc;

use super::conn::ConnHandle;

/// Parts are sent once they hold at least this much.
pub const PART_BYTES: usize = 128 * 1024;
/// A part's buffer: its size and what one more offer's worth of writing may add.
const PART_ROOM: usize = PART_BYTES + 64 * 1024;
/// Parts written but not yet sent, at most.
const PARTS_IN_FLIGHT: usize = 2;

/// What travels from the writer to the connection: a part, and whether it is the last.
type Part = std::io::Result<(Bytes, bool)>;

/// The writing end, used from a blocking thread. Dropped before the last part (a client
/// given up on, a writer that failed), it resets the connection: hyper would otherwise wait,
/// for as long as the client stays, for the parts it already holds to be read before it
/// saw the answer end broken.
pub struct PartSender {
    tx: mpsc::Sender<Part>,
    /// How long a part may wait for the client to read the ones before it.
    patience: Duration,
    /// False once the client has gone or stalled: the rest is written nowhere.
    open: bool,
    /// The last part was sent.
    finished: bool,
    /// The connection the answer goes out on.
    conn: Option<ConnHandle>,
}

/// The sending end: a response body of the parts, in order. It ends only after the part
/// marked last; a writer gone before that (a client that stalled for the whole patience, a
/// writer that failed) ends it broken, so that the connection is closed without the end of
/// the chunked message and the client cannot take the parts for a whole answer.
pub struct StreamedBody {
    rx: mpsc::Receiver<Part>,
    /// The last part has come.
    whole: bool,
}

/// An empty buffer for writing a part in.
pub fn part_buffer() -> Vec<u8> {
    Vec::with_capacity(PART_ROOM)
}

/// A connected pair, for an answer going out on `conn`.
pub fn channel(patience: Duration, conn: Option<ConnHandle>) -> (PartSender, StreamedBody) {
    let (tx, rx) = mpsc::channel(PARTS_IN_FLIGHT);
    (PartSender { tx, patience, open: true, finished: false, conn }, StreamedBody { rx, whole: false })
}

impl PartSender {
    /// Sends what `out` holds once it reaches [`PART_BYTES`] (or always, with `last`, even
    /// nothing: the last part tells the connection that the answer is whole).
    /// Must be called from outside the async runtime (it blocks on a full channel).
    pub fn part_done(&mut self, out: &mut Vec<u8>, last: bool) {
        if !last && out.len() < PART_BYTES {
            return;
        }
        let mut part = std::mem::replace(out, if last { Vec::new() } else { part_buffer() });
        // What the part did not use goes back now (shrunk in place), not when it is sent.
        part.shrink_to_fit();
        let part = Bytes::from(part);
        if !self.open {
            return;
        }
        let handle = tokio::runtime::Handle::current();
        // A client that hung up, or stopped reading for the whole patience, gets no more;
        // dropping the sender then resets the connection.
        let sent = match handle.block_on(self.room()) {
            Some(room) => {
                room.send(Ok((part, last)));
                true
            }
            None => false,
        };
        self.open = sent;
        self.finished = last && sent;
    }

    /// Room in the channel for a part, while the client reads: it is given up on only once
    /// it has taken none of what was written for the whole patience. Waiting for the room
    /// alone could give up on a client reading steadily: the kernel lets more be written
    /// only once a good share of the socket's buffer (megabytes) has drained.
    async fn room(&self) -> Option<mpsc::Permit<'_, Part>> {
        match self.tx.try_reserve() {
            Ok(room) => return Some(room),
            Err(mpsc::error::TrySendError::Closed(())) => return None,
            Err(mpsc::error::TrySendError::Full(())) => {}
        }
        let mut taken = self.conn.as_ref().and_then(ConnHandle::taken);
        loop {
            match tokio::time::timeout(self.patience, self.tx.reserve()).await {
                Ok(room) => return room.ok(),
                Err(_) => {
                    let now = self.conn.as_ref().and_then(ConnHandle::taken);
                    if now.is_none() || now <= taken {
                        return None;
                    }
                    taken = now;
                }
            }
        }
    }

    /// Ends the answer as broken: the connection is closed without finishing it, so the
    /// client sees an incomplete response rather than a truncated one that looks whole.
    pub fn fail(self, why: &str) {
        let broken = std::io::Error::other(why.to_string());
        let _ = tokio::runtime::Handle::current()
            .block_on(async { tokio::time::timeout(self.patience, self.tx.send(Err(broken))).await });
    }

    /// Whether every part so far reached the connection (the request's log line tells the
    /// same through the answer's body, `answer_cut`).
    #[cfg(test)]
    pub fn delivered(&self) -> bool {
        self.open
    }
}

impl Drop for PartSender {
    fn drop(&mut self) {
        if let (false, Some(conn)) = (self.finished, &self.conn) {
            conn.abort();
        }
    }
}

impl HttpBody for StreamedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            return match std::task::ready!(self.rx.poll_recv(cx)) {
                Some(Ok((part, last))) => {
                    self.whole |= last;
                    // An empty last part only marks the end (an empty chunk would end the
                    // chunked message by itself).
                    if part.is_empty() {
                        continue;
                    }
                    Poll::Ready(Some(Ok(Frame::data(part))))
                }
                Some(Err(broken)) => Poll::Ready(Some(Err(broken))),
                None if self.whole => Poll::Ready(None),
                None => {
                    // Once: hyper stops polling a body that failed.
                    self.whole = true;
                    Poll::Ready(Some(Err(std::io::Error::other("the answer was given up before its end"))))
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_arrive_whole_and_in_order() {
        let (mut tx, body) = channel(Duration::from_secs(5), None);
        let writer = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for i in 0..2000u32 {
                out.extend_from_slice(format!("{i},").as_bytes());
                out.extend(std::iter::repeat_n(b' ', 500));
                tx.part_done(&mut out, false);
            }
            tx.part_done(&mut out, true);
            tx.delivered()
        });
        let received = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        assert_eq!(writer.await.ok(), Some(true));
        let text = String::from_utf8(received.to_vec()).unwrap_or_default();
        let numbers: Vec<u32> = text.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        assert_eq!(numbers, (0..2000).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_empty_last_part_ends_the_answer_whole() {
        let (mut tx, body) = channel(Duration::from_secs(5), None);
        let writer = tokio::task::spawn_blocking(move || {
            let mut out = vec![b'x'; PART_BYTES];
            tx.part_done(&mut out, false);
            // Everything went with the part before: the last one is empty.
            tx.part_done(&mut out, true);
        });
        let received = body.collect().await.map(|c| c.to_bytes());
        assert!(writer.await.is_ok());
        assert_eq!(received.ok().map(|b| b.len()), Some(PART_BYTES));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_gone_before_the_last_part_ends_the_answer_broken() {
        let (mut tx, body) = channel(Duration::from_secs(5), None);
        let writer = tokio::task::spawn_blocking(move || {
            let mut out = vec![b'x'; PART_BYTES];
            tx.part_done(&mut out, false);
            // Dropped without the last part, as after a client stalled for the patience.
        });
        let received = body.collect().await;
        assert!(writer.await.is_ok());
        assert!(received.is_err(), "an unfinished answer must not end as a whole one");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_stops_reading_is_given_up_on() {
        let (mut tx, body) = channel(Duration::from_millis(50), None);
        let writer = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for _ in 0..(PARTS_IN_FLIGHT + 3) {
                out.resize(PART_BYTES, b'x');
                tx.part_done(&mut out, false);
            }
            tx.delivered()
        });
        // Nobody reads `body`: the writer must not wait forever.
        assert_eq!(writer.await.ok(), Some(false));
        drop(body);
    }
}
