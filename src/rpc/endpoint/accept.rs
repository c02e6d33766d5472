//! The accepting side of the endpoint: the listener loop and the admission of streams that have
//! not proven who they are yet. An accepted stream is nobody until its handshake succeeds: it
//! gets `accept_timeout` for TLS and the handshake, counts against [`MAX_ACCEPTING_PER_SOURCE`]
//! and [`MAX_ACCEPTING`], and is the first to be dropped for a newcomer while it has sent nothing,
//! then while it has not sent one whole handshake message ([`Progress`]): idle sockets and
//! sockets that drip their bytes cannot keep a peer that speaks at once out. What is left to an
//! attacker on the same source network — a valid `Hello` per slot, then silence — is dropped at
//! the handshake's byte-rate floor ([`crate::transport::handshake::MESSAGE_GRACE`]).

use super::*;

/// Handshakes in progress on accepted streams, from every source together: a flood of
/// connections that never shake hands cannot grow the node's tasks without bound.
const MAX_ACCEPTING: usize = 64;

/// Handshakes in progress from one source network ([`source_prefix`]: a /24, a /64, all of
/// loopback), so one flooding host cannot take every slot from the others by using many of
/// its addresses.
const MAX_ACCEPTING_PER_SOURCE: usize = 8;

/// The pause after `accept` fails (out of file descriptors, say), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// One handshake in progress on an accepted stream.
struct PendingAccept {
    /// Where it came from (the network of a TCP peer, [`source_prefix`]): the unit of
    /// [`MAX_ACCEPTING_PER_SOURCE`].
    source: String,
    /// How far the peer got: a silent stream is the first to make room for a newcomer, then
    /// one that has not sent a whole message; one that has keeps its slot until its deadline.
    progress: Arc<Progress>,
    /// Ends the handshake at once (sent when the slot is given to a newcomer).
    evict: oneshot::Sender<()>,
}

/// The handshakes in progress on accepted streams, oldest first.
#[derive(Default)]
pub(super) struct Accepting {
    next: u64,
    pending: BTreeMap<u64, PendingAccept>,
}

/// How far the peer of a handshake in progress got (see [`PendingAccept`]).
#[derive(Debug, Default)]
pub(super) struct Progress(AtomicU8);

impl Progress {
    /// Nothing arrived.
    const SILENT: u8 = 0;
    /// Some bytes arrived, not a whole handshake message.
    const TALKING: u8 = 1;
    /// A whole handshake message arrived: a peer that speaks the protocol.
    const SPOKE: u8 = 2;

    fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    /// Moves up to `level` (never down).
    fn reach(&self, level: u8) {
        self.0.fetch_max(level, Ordering::Relaxed);
    }
}

/// A stream that shows every byte it reads to `observe` (to note how far the peer got, see
/// [`Progress`]); writes pass through.
pub(super) struct Observed<S, F> {
    inner: S,
    observe: F,
}

/// The raw stream (under TLS if any), noting the first byte from the peer.
fn watched(inner: BoxStream, progress: Arc<Progress>) -> Observed<BoxStream, impl FnMut(&[u8])> {
    Observed {
        inner,
        observe: move |_: &[u8]| progress.reach(Progress::TALKING),
    }
}

/// What the handshake reads (over TLS if any, so it sees the frames themselves), noting when
/// the peer's first whole handshake message has arrived.
pub(super) fn first_message<S>(
    inner: S,
    progress: Arc<Progress>,
) -> Observed<S, impl FnMut(&[u8])> {
    let mut frame = FirstFrame::default();
    Observed {
        inner,
        observe: move |bytes: &[u8]| {
            if frame.count(bytes) {
                progress.reach(Progress::SPOKE);
            }
        },
    }
}

/// Counts bytes towards the first length-prefixed frame of a stream.
#[derive(Debug, Default)]
struct FirstFrame {
    /// Its length prefix, as it arrives.
    header: [u8; 4],
    /// Bytes of it (prefix included) read so far.
    seen: usize,
    /// Whether it is whole.
    whole: bool,
}

impl FirstFrame {
    /// Counts `bytes` just read; true once the first frame is whole (and from then on).
    fn count(&mut self, bytes: &[u8]) -> bool {
        if self.whole {
            return true;
        }
        let seen = self.seen;
        for (at, &byte) in (seen..).zip(bytes.iter().take(4usize.saturating_sub(seen))) {
            self.header[at] = byte;
        }
        self.seen = seen + bytes.len();
        self.whole = self.seen >= 4
            && usize::try_from(u32::from_be_bytes(self.header))
                .is_ok_and(|length| self.seen - 4 >= length);
        self.whole
    }
}

/// The source a stream counts against: the IP of `host:port`, or all of `from` if it is not one
/// (a simulated network's names).
fn source_of(from: &str) -> String {
    match from.parse::<SocketAddr>() {
        Ok(address) => source_prefix(address.ip()),
        Err(_) => from.to_owned(),
    }
}

/// The unit of [`MAX_ACCEPTING_PER_SOURCE`]: the network a flooding host can pick addresses
/// from at will, not one address — all of 127/8 on loopback, the /24 of an IPv4 address
/// elsewhere, the /64 of an IPv6 one (a host's usual allocation); an IPv4-mapped IPv6 address
/// counts as its IPv4 address.
fn source_prefix(ip: std::net::IpAddr) -> String {
    use std::net::IpAddr;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => "127.0.0.0/8".to_owned(),
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        IpAddr::V6(v6) if v6.is_loopback() => "::1/128".to_owned(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

impl Accepting {
    /// The handshake to drop for a newcomer, of `source` or of any: the oldest whose peer has
    /// said nothing yet, else the oldest whose peer has not sent a whole message.
    fn victim(&self, source: Option<&str>) -> Option<u64> {
        [Progress::SILENT, Progress::TALKING]
            .into_iter()
            .find_map(|level| {
                self.pending.iter().find(|(_, pending)| {
                    pending.progress.get() == level
                        && source.is_none_or(|source| pending.source == source)
                })
            })
            .map(|(slot, _)| *slot)
    }
}

/// What a connection was accepted with: its slot, its progress and its eviction notice.
type Admission = (u64, Arc<Progress>, oneshot::Receiver<()>);

impl<S: AsyncRead + Unpin, F: FnMut(&[u8]) + Unpin> AsyncRead for Observed<S, F> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            (this.observe)(&buf.filled()[before..]);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin, F: Unpin> AsyncWrite for Observed<S, F> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    /// Forwarded, so a frame sent in segments (a data answer's buffers behind its envelope)
    /// goes out in one vectored write, not a write per piece.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Inner {
    /// A slot for a handshake on a stream accepted from `source`, or `None` if every slot is
    /// held by a peer that sent a whole message. Full slots are freed by evicting the oldest
    /// *silent* stream, else the oldest that has not sent a whole message (of this source if it
    /// holds its share, else of any): idle or dripping sockets, however many and however fast
    /// they come back, cannot keep a peer that speaks at once from shaking hands.
    pub(super) fn admit(&self, source: &str) -> Option<Admission> {
        let mut accepting = lock(&self.accepting);
        let of_source = accepting
            .pending
            .values()
            .filter(|pending| pending.source == source)
            .count();
        let full = if of_source >= MAX_ACCEPTING_PER_SOURCE {
            Some(accepting.victim(Some(source)))
        } else if accepting.pending.len() >= MAX_ACCEPTING {
            Some(accepting.victim(None))
        } else {
            None
        };
        match full {
            Some(None) => return None,
            Some(Some(victim)) => {
                if let Some(evicted) = accepting.pending.remove(&victim) {
                    self.metrics.rejected_connections.increment();
                    let _ = evicted.evict.send(());
                }
            }
            None => {}
        }
        let slot = accepting.next;
        accepting.next += 1;
        let progress = Arc::new(Progress::default());
        let (evict, evicted) = oneshot::channel();
        accepting.pending.insert(
            slot,
            PendingAccept {
                source: source.to_owned(),
                progress: Arc::clone(&progress),
                evict,
            },
        );
        Some((slot, progress, evicted))
    }

    /// Accepts connections until the endpoint shuts down.
    pub(super) async fn accept_loop(self: Arc<Self>, mut listener: Box<dyn Listener>) {
        loop {
            let accepted = tokio::select! {
                biased;
                _ = self.shutdown.wait() => break,
                accepted = listener.accept() => accepted,
            };
            let (stream, from) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    log::warn!("{}: accept failed: {error}", self.config.node_name);
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let Some((slot, progress, evicted)) = self.admit(&source_of(&from)) else {
                self.metrics.rejected_connections.increment();
                log::warn!(
                    "{}: {MAX_ACCEPTING} handshakes in progress (at most \
                     {MAX_ACCEPTING_PER_SOURCE} per source); dropped the connection from {from}",
                    self.config.node_name
                );
                continue;
            };
            let stream: BoxStream = Box::new(watched(stream, Arc::clone(&progress)));
            let endpoint = Arc::clone(&self);
            tokio::task::spawn_local(async move {
                let established = tokio::select! {
                    biased;
                    Ok(()) = evicted => None,
                    established = endpoint.open(stream, Opening::Accept(progress), &from) => Some(established),
                };
                lock(&endpoint.accepting).pending.remove(&slot);
                match established {
                    None => log::debug!(
                        "{}: dropped the connection from {from} (nothing whole said) to make room",
                        endpoint.config.node_name
                    ),
                    Some(Ok((id, connection))) => endpoint.adopt_accepted(id, connection),
                    Some(Err(error)) => {
                        endpoint.metrics.rejected_connections.increment();
                        if endpoint.refused_for_own_dial(&error) {
                            // Two nodes that dial each other at once: each keeps one
                            // connection, and this one is the spare. Routine, not a warning.
                            log::info!(
                                "{}: refused a connection from {from}, which dialled while this \
                                 node's own dial to it connected (both use that one): {}",
                                endpoint.config.node_name,
                                Chain(&error)
                            );
                        } else {
                            log::warn!(
                                "{}: refused a connection from {from}: {}",
                                endpoint.config.node_name,
                                Chain(&error)
                            );
                        }
                    }
                }
            });
            // Let the handshakes just spawned read what their peers sent before the next
            // stream is accepted: a peer that talks at once is marked before it could be
            // evicted as silent by a burst of newcomers.
            tokio::task::yield_now().await;
        }
        log::info!("{}: stopped listening", self.config.node_name);
    }

    /// Whether to take an authenticated connection from `peer` (the handshake's admission): not
    /// while this node holds another connection with that id whose peer answers a probe, so a
    /// holder of the secret cannot take over a live node's id (and its tasks, its heartbeats)
    /// by claiming it. A held connection that was silent for half the accept timeout and stays
    /// silent for as long again (no answer to a probe), or closes, is proven dead: it is closed and the newcomer (a restarted node, a node whose
    /// network came back) is admitted.
    pub(super) async fn admit_peer(self: Arc<Self>, peer: String) -> Result<(), String> {
        let mut held: Vec<(u64, Connection)> = self.live_accepted(&peer).into_iter().collect();
        if let Some(PeerSlot::Connected { id, connection }) = lock(&self.peers).get(&peer)
            && connection.close_reason().is_none()
            && held.iter().all(|(held_id, _)| held_id != id)
        {
            held.push((*id, connection.clone()));
        }
        let patience = self.config.accept_timeout / 2;
        for (_, connection) in held {
            // Heard from within the patience, or answering a probe within it: alive. The first
            // spares a busy peer's live connection (a simultaneous dial between two loaded
            // TaskManagers) a probe that waits behind its data and comes too late.
            if connection.heard_within(patience) || connection.probe(patience).await {
                return Err(format!(
                    "{} already holds a live authenticated connection with {peer}; a second \
                     connection may not claim its id",
                    self.local_node
                ));
            }
            log::info!(
                "{}: {peer} connects again and its old connection did not answer within \
                 {patience:?}: closing the old one",
                self.config.node_name
            );
            connection.close("its peer connected again and it did not answer a probe");
        }
        Ok(())
    }

    /// Whether `error` refused a peer this node is connected to by a live dial of its own (not
    /// a connection it accepted): the two nodes dialled each other at once (or a holder of the
    /// secret claims the id of a node this one dialled: refused all the same). A claim on the
    /// id of a peer this node only accepted from is refused the same way, and warned of.
    pub(super) fn refused_for_own_dial(&self, error: &DialError) -> bool {
        let DialError::Connection(ConnectionError::Handshake(HandshakeError::NotAdmitted {
            peer,
            ..
        })) = error
        else {
            return false;
        };
        let accepted = self.live_accepted(peer).map(|(id, _)| id);
        matches!(
            lock(&self.peers).get(peer.as_str()),
            Some(PeerSlot::Connected { id, connection })
                if connection.close_reason().is_none() && Some(*id) != accepted
        )
    }

    /// Records a connection accepted from a peer: it replaces (closes) that peer's previous
    /// accepted connection (proven dead by [`admit_peer`](Self::admit_peer), or a simultaneous one), and
    /// is the one this node sends on unless it has one of its own.
    pub(super) fn adopt_accepted(&self, id: u64, connection: Connection) {
        let peer = connection.peer().to_owned();
        let previous = lock(&self.accepted).insert(peer.clone(), (id, connection.clone()));
        if let Some((_, previous)) = previous {
            previous.close("replaced by a newer connection from the same peer");
        }
        let mut peers = lock(&self.peers);
        let keep = matches!(
            peers.get(&peer),
            Some(PeerSlot::Connected { connection: current, .. })
                if current.close_reason().is_none()
        ) || matches!(peers.get(&peer), Some(PeerSlot::Dialing(_)));
        if !keep {
            peers.insert(peer, PeerSlot::Connected { id, connection });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_whole_frame_is_noticed_however_it_arrives() {
        let frame: Vec<u8> = [&5u32.to_be_bytes()[..], b"hello", b"next frame"].concat();
        // At once, byte by byte, and with the prefix split.
        for cuts in [vec![frame.len()], vec![1; frame.len()], vec![2, 3, 4, 20]] {
            let mut counter = FirstFrame::default();
            let mut at = 0;
            let mut whole_at = None;
            for cut in cuts.iter().copied() {
                let end = (at + cut).min(frame.len());
                let whole = counter.count(&frame[at..end]);
                at = end;
                if whole && whole_at.is_none() {
                    whole_at = Some(at);
                }
            }
            let whole_at = whole_at.expect("the frame was whole");
            assert!(
                (9..=frame.len()).contains(&whole_at),
                "{cuts:?}: {whole_at}"
            );
            if cuts.len() == frame.len() {
                assert_eq!(whole_at, 9, "not before its last byte, not after");
            }
        }
        // A prefix and part of the body is not a whole message.
        assert!(!FirstFrame::default().count(&frame[..8]));
    }

    #[test]
    fn a_newcomer_takes_the_slot_of_the_oldest_silent_then_partial_never_a_whole_speaker() {
        let mut accepting = Accepting::default();
        let mut add = |source: &str, level: u8| {
            let progress = Arc::new(Progress::default());
            progress.reach(level);
            let slot = accepting.next;
            accepting.next += 1;
            accepting.pending.insert(
                slot,
                PendingAccept {
                    source: source.to_owned(),
                    progress,
                    evict: oneshot::channel().0,
                },
            );
            slot
        };
        let spoke = add("a", Progress::SPOKE);
        let partial = add("a", Progress::TALKING);
        let silent_b = add("b", Progress::SILENT);
        let silent_a = add("a", Progress::SILENT);
        assert_eq!(accepting.victim(Some("a")), Some(silent_a));
        assert_eq!(accepting.victim(None), Some(silent_b));
        accepting.pending.remove(&silent_a);
        assert_eq!(accepting.victim(Some("a")), Some(partial));
        accepting.pending.remove(&partial);
        assert_eq!(accepting.victim(Some("a")), None, "{spoke} keeps its slot");
    }

    #[test]
    fn a_source_is_the_network_a_host_can_pick_addresses_from() {
        for (from, source) in [
            ("127.0.0.1:5000", "127.0.0.0/8"),
            ("127.45.3.9:1", "127.0.0.0/8"),
            ("10.1.2.3:6123", "10.1.2.0/24"),
            ("10.1.2.254:1", "10.1.2.0/24"),
            ("10.1.3.1:1", "10.1.3.0/24"),
            ("[2001:db8:1:2:aaaa::1]:6123", "2001:db8:1:2::/64"),
            ("[2001:db8:1:2:ffff:1:2:3]:1", "2001:db8:1:2::/64"),
            ("[::1]:1", "::1/128"),
            ("[::ffff:192.168.7.9]:1", "192.168.7.0/24"),
            ("not an address", "not an address"),
        ] {
            assert_eq!(source_of(from), source, "{from}");
        }
    }
}
