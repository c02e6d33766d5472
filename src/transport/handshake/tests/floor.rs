//! The acceptor's byte-rate floor (issue 34): dripping and stalling peers are dropped within
//! it, a peer on a slow link within it is admitted.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use tokio::io::{DuplexStream, ReadBuf, duplex};

use super::*;

/// Issue 34 (byte-rate floor): a peer that drips its Hello a byte at a time, or sends a valid
/// Hello and Dial (no secret needed) and then stalls before its Proof, gives the acceptor's
/// pre-authentication slot back within the floor, not after the whole handshake timeout.
#[tokio::test(start_paused = true)]
async fn the_acceptor_drops_a_dripping_or_stalling_peer_at_the_byte_rate_floor() {
    // Dripping: the length prefix arrives, then one byte of the body every 100 ms.
    let (ours, mut theirs) = duplex(PIPE);
    let drip = async move {
        let body = codec::encode(&HandshakeMessage::Hello(peer_hello("peer", 7))).unwrap();
        let _ = theirs.write_all(&(body.len() as u32).to_be_bytes()).await;
        for byte in body {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if theirs.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    };
    assert_dropped_at_the_floor(ours, drip).await;

    // Stalling after a valid Hello and Dial: the acceptor proves itself, then waits for the
    // peer's Proof no longer than the floor allows a message.
    let (ours, mut theirs) = duplex(PIPE);
    let stall = async move {
        for message in [
            HandshakeMessage::Hello(peer_hello("peer", 7)),
            HandshakeMessage::Dial(Dial {
                node_id: "me".to_owned(),
            }),
        ] {
            write_message(&mut theirs, &message).await.unwrap();
        }
        // Keep the connection open (reading what the acceptor says) past the floor.
        let _ = read_message(&mut theirs).await;
        let _ = read_message(&mut theirs).await;
        tokio::time::sleep(TIMEOUT).await;
    };
    assert_dropped_at_the_floor(ours, stall).await;
}

/// Runs a real acceptor on `ours` against `peer` on the other end: it fails as too slow, within
/// twice the grace.
async fn assert_dropped_at_the_floor(ours: DuplexStream, peer: impl Future<Output = ()>) {
    let start = tokio::time::Instant::now();
    let timed = async {
        let result = acceptor(ours, config("me"), rng(1)).await;
        (result, start.elapsed())
    };
    let ((result, took), ()) = tokio::join!(timed, peer);
    assert!(
        matches!(result, Err(HandshakeError::TooSlow { .. })),
        "{result:?}"
    );
    assert!(took < MESSAGE_GRACE * 2, "{took:?}");
}

/// A dialler whose messages take most of the grace to arrive (a slow link) still gets in.
#[tokio::test(start_paused = true)]
async fn a_peer_on_a_slow_link_within_the_floor_is_admitted() {
    let (ours, theirs) = duplex(PIPE);
    let slow = Delayed {
        inner: theirs,
        delay: MESSAGE_GRACE * 4 / 5,
        pending: None,
    };
    let (i, a) = tokio::join!(
        initiator(slow, config("tm-1"), "jm", rng(1)),
        acceptor(ours, config("jm"), rng(2))
    );
    assert!(i.is_ok() && a.is_ok(), "{i:?} {a:?}");
}

/// A stream whose every write reaches the peer `delay` later (a slow link, one way).
struct Delayed {
    inner: DuplexStream,
    delay: Duration,
    pending: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncRead for Delayed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Delayed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let delay = self.delay;
        let sleep = self
            .pending
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(delay)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.pending = None;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
