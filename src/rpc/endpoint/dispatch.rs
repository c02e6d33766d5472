//! Inbound dispatch: what an authenticated peer sends goes to the local actor it names, checked
//! first (a sender claiming another node, or a message only this process may send, closes the
//! connection); an ask's answer is awaited in a task of its own, bounded by the ask timeout, and
//! sent back on the connection it came from.

use super::*;

impl Inner {
    /// Hands an ask or tell to the local actor it names, without waiting for the answer (that
    /// is awaited in a task of its own, so the reader keeps reading).
    pub(super) fn dispatch(
        &self,
        connection: &Connection,
        peer: &str,
        envelope: Envelope,
        permit: OwnedSemaphorePermit,
    ) {
        let Envelope {
            target,
            sender,
            correlation,
            kind,
            payload,
        } = envelope;
        // The handshake proved who the peer is; an envelope cannot claim to come from elsewhere.
        if let Some(sender) = sender.filter(|sender| sender.node != peer) {
            log::warn!(
                "{}: {peer} sent an envelope as {sender}; closing the connection",
                self.config.node_name
            );
            connection.close(format!("{peer} claimed to send as {sender}"));
            return;
        }
        if let Some(name) = payload.local_only() {
            log::warn!(
                "{}: {peer} sent {name}, which only this process may send; closing the connection",
                self.config.node_name
            );
            connection.close(format!("{peer} sent {name}"));
            return;
        }
        let address = ActorAddress::new(self.local_node.clone(), target);
        let missing = |kind: &str| {
            format!(
                "no {kind} is called {} on {}",
                address.name, self.local_node
            )
        };
        let (name, delivery) = match payload {
            Payload::JobManager(message) => (
                message.name(),
                self.directory
                    .job_manager(&address)
                    .map(|gateway| message.deliver(&gateway))
                    .ok_or_else(|| missing("JobManager")),
            ),
            Payload::ResourceManager(message) => (
                message.name(),
                self.directory
                    .resource_manager(&address)
                    .map(|gateway| message.deliver(&gateway))
                    .ok_or_else(|| missing("resource manager")),
            ),
            Payload::TaskManager(message) => (
                message.name(),
                self.directory
                    .task_manager(&address)
                    .map(|gateway| message.deliver(&gateway))
                    .ok_or_else(|| missing("TaskManager")),
            ),
            // The connection completes replies itself and validated the rest.
            Payload::Reply(reply) => {
                log::warn!(
                    "{}: {peer} sent a {} reply as a {kind}; dropped",
                    self.config.node_name,
                    reply.name()
                );
                return;
            }
        };
        let node = self.config.node_name.clone();
        let peer = peer.to_owned();
        let target = address.name;
        // The peer stops waiting after its ask timeout; so does the handler's task (the message
        // stays queued at the actor), which bounds how long it holds its permit.
        let patience = self.config.ask_timeout;
        match kind {
            EnvelopeKind::Ask => {
                let connection = connection.clone();
                tokio::task::spawn_local(async move {
                    let _permit = permit;
                    let reply = match delivery {
                        Ok(answer) => match tokio::time::timeout(patience, answer).await {
                            Ok(answer) => answer.unwrap_or_else(|error| {
                                Reply::Failed(format!("{name} to {target}: {error}"))
                            }),
                            Err(_) => Reply::Failed(format!(
                                "{name} to {target}: no answer within {patience:?}"
                            )),
                        },
                        Err(reason) => Reply::Failed(format!("{name}: {reason}")),
                    };
                    if let Reply::Failed(reason) = &reply {
                        log::warn!("{node}: ask from {peer} failed: {reason}");
                    }
                    if let Err(error) = connection.reply(correlation, Payload::Reply(reply)) {
                        log::warn!(
                            "{node}: cannot answer {name} from {peer}: {}",
                            Chain(&error)
                        );
                    }
                });
            }
            EnvelopeKind::Tell => match delivery {
                Ok(answer) => {
                    tokio::task::spawn_local(async move {
                        let _permit = permit;
                        if let Ok(Err(error)) = tokio::time::timeout(patience, answer).await {
                            log::warn!("{node}: {name} from {peer} to {target}: {error}");
                        }
                    });
                }
                Err(reason) => log::warn!("{node}: {name} from {peer} dropped: {reason}"),
            },
            EnvelopeKind::Reply => {}
        }
    }
}
