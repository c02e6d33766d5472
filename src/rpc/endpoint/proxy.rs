//! Proxies: how this node's actors reach actors on other nodes. The [`RemoteResolver`] hands out
//! one [`RemoteProxy`] per remote actor; a proxy implements the same handlers as the actor it
//! stands for, so callers hold the same gateways whether a peer is local or not (Flink's RPC
//! gateway proxies). Each message finds the live connection to its node, or dials one.

use super::*;

/// A future answer to a proxied message.
type Pending = Pin<Box<dyn Future<Output = Result<Reply, RemoteError>>>>;

/// Queues `payload` for `target` on `connection` now and returns its answer.
fn send_on(connection: &Connection, target: String, payload: Payload, tell: bool) -> Pending {
    if tell {
        let sent = connection
            .tell(Envelope {
                target,
                sender: None,
                correlation: 0,
                kind: EnvelopeKind::Tell,
                payload,
            })
            .map(|()| Reply::Unit(()))
            .map_err(RemoteError::from);
        Box::pin(std::future::ready(sent))
    } else {
        let asked = connection.ask(target, None, payload);
        Box::pin(async move {
            match asked.await? {
                Payload::Reply(reply) => Ok(reply),
                // The connection validated that a reply envelope carries a reply; kept total.
                other => Err(RemoteError::Reply(ReplyError::Unexpected {
                    expected: "reply",
                    got: envelope::Payload::describe(&other),
                })),
            }
        })
    }
}

/// The node's [`Resolver`]: local actors from its directory, remote ones as proxies.
#[derive(Debug)]
pub struct RemoteResolver {
    pub(super) inner: Arc<Inner>,
}

/// The local stand-in for one remote actor whose protocol is the wire enum `W`. It handles
/// every message `M` that converts into `W` (one generic impl, so a message added to a
/// `protocol!` list is proxied without a line here; the gateway's `of` checks the proxy handles
/// the whole list). It holds no connection: each message finds the live one or dials, so a
/// proxy outlives connections that come and go.
pub struct RemoteProxy<W> {
    endpoint: Arc<Inner>,
    address: ActorAddress,
    wire: PhantomData<fn() -> W>,
}

/// A proxy's answer: the caller gets `R` on success, and `MailboxError::Closed` (its reply
/// channel dropped) as soon as the message is known to have failed (see the module docs).
pub struct RemoteResponse<R>(Pin<Box<dyn Future<Output = Result<R, RemoteError>>>>);

impl RemoteResolver {
    /// Whether `address` names an actor of the protocol `kind`; an envelope for a name of
    /// another kind would be refused by the peer (and close the connection), so none is sent.
    fn speaks(address: &ActorAddress, kind: PayloadKind) -> bool {
        let speaks = PayloadKind::of_target(&address.name) == Some(kind);
        if !speaks {
            log::warn!("{address} is not the address of a {kind} recipient");
        }
        speaks
    }
}

impl Resolver for RemoteResolver {
    fn local_node(&self) -> String {
        self.inner.local_node.clone()
    }

    fn register(&self, address: ActorAddress, actor: LocalActor) {
        self.inner.directory.register(address, actor);
    }

    fn unregister(&self, address: &ActorAddress) {
        self.inner.directory.unregister(address);
    }

    fn job_manager(&self, address: &ActorAddress) -> Option<JobManagerGateway> {
        if address.node == self.inner.local_node {
            return self.inner.directory.job_manager(address);
        }
        if !Self::speaks(address, PayloadKind::JobManager) {
            return None;
        }
        self.inner.proxy(
            address,
            |actor| match actor {
                LocalActor::JobManager(gateway) => Some(gateway.clone()),
                _ => None,
            },
            |endpoint, address| {
                LocalActor::JobManager(JobManagerGateway::of(
                    &JobManagerProxy::new(endpoint, address).start(),
                ))
            },
        )
    }

    fn resource_manager(&self, address: &ActorAddress) -> Option<ResourceManagerGateway> {
        if address.node == self.inner.local_node {
            return self.inner.directory.resource_manager(address);
        }
        if !Self::speaks(address, PayloadKind::ResourceManager) {
            return None;
        }
        self.inner.proxy(
            address,
            |actor| match actor {
                LocalActor::ResourceManager(gateway) => Some(gateway.clone()),
                _ => None,
            },
            |endpoint, address| {
                LocalActor::ResourceManager(ResourceManagerGateway::of(
                    &ResourceManagerProxy::new(endpoint, address).start(),
                ))
            },
        )
    }

    fn task_manager(&self, address: &ActorAddress) -> Option<TaskManagerGateway> {
        if address.node == self.inner.local_node {
            return self.inner.directory.task_manager(address);
        }
        if !Self::speaks(address, PayloadKind::TaskManager) {
            return None;
        }
        self.inner.proxy(
            address,
            |actor| match actor {
                LocalActor::TaskManager(gateway) => Some(gateway.clone()),
                _ => None,
            },
            |endpoint, address| {
                LocalActor::TaskManager(TaskManagerGateway::of(
                    &TaskManagerProxy::new(endpoint, address).start(),
                ))
            },
        )
    }
}

/// The proxy of a remote JobManager.
pub type JobManagerProxy = RemoteProxy<JobManagerMessage>;
/// The proxy of a remote resource manager.
pub type ResourceManagerProxy = RemoteProxy<ResourceManagerMessage>;
/// The proxy of a remote TaskManager.
pub type TaskManagerProxy = RemoteProxy<TaskManagerMessage>;

impl<W> RemoteProxy<W> {
    fn new(endpoint: Arc<Inner>, address: ActorAddress) -> Self {
        Self {
            endpoint,
            address,
            wire: PhantomData,
        }
    }
}

impl<W> fmt::Debug for RemoteProxy<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteProxy({})", self.address)
    }
}

impl<W: 'static> Actor for RemoteProxy<W> {
    type Context = Context<Self>;
}

impl<W, M> Handler<M> for RemoteProxy<W>
where
    W: Into<Payload> + 'static,
    M: Message + Into<W> + 'static,
    M::Result: Answer + 'static,
{
    type Result = RemoteResponse<M::Result>;

    fn handle(&mut self, message: M, _: &mut Context<Self>) -> Self::Result {
        // A message answered with `()` needs no answer from the peer: it travels as a tell.
        let tell = TypeId::of::<M::Result>() == TypeId::of::<()>();
        let name = std::any::type_name::<M>()
            .rsplit("::")
            .next()
            .unwrap_or("message");
        let wire: W = message.into();
        let pending = self.endpoint.request(&self.address, wire.into(), tell);
        let address = self.address.clone();
        let node = self.endpoint.config.node_name.clone();
        RemoteResponse(Box::pin(async move {
            let answer = pending
                .await
                .and_then(|reply| M::Result::from_reply(reply).map_err(RemoteError::from));
            if let Err(error) = &answer {
                log::warn!("{node}: {name} to {address} failed: {}", Chain(error));
            }
            answer
        }))
    }
}

impl<A, M, R> MessageResponse<A, M> for RemoteResponse<R>
where
    A: Actor,
    M: Message<Result = R>,
    R: 'static,
{
    /// A caller that stops waiting (its timeout, or its actor stopped) before the message left
    /// this node — the peer was being dialled — withdraws it: it is never sent. Otherwise an
    /// ask could reach its peer long after its sender gave up, once the connection came back: a
    /// deposed leader's deployment written after the next leader took over (seed 6950 of the
    /// 20,000-seed HA sweep). A message with nobody waiting (`do_send`) is always sent.
    fn handle(self, _: &mut A::Context, tx: Option<OneshotSender<R>>) {
        actix::spawn(async move {
            let Some(mut tx) = tx else {
                drop(self.0.await);
                return;
            };
            let answer = tokio::select! {
                biased;
                answer = self.0 => answer,
                () = tx.closed() => return,
            };
            if let Ok(answer) = answer {
                // The caller may have stopped waiting meanwhile; nothing to tell it then.
                drop(tx.send(answer));
            }
            // On failure `tx` is dropped here: the caller's `send` fails with `Closed`.
        });
    }
}

impl Inner {
    /// Sends `payload` to `address` as a tell (`tell`) or an ask. With a live connection the
    /// envelope is queued before this returns, so messages through one proxy keep their order.
    pub(super) fn request(
        self: &Arc<Self>,
        address: &ActorAddress,
        payload: Payload,
        tell: bool,
    ) -> Pending {
        if let Some(connection) = self.live(&address.node) {
            return send_on(&connection, address.name.clone(), payload, tell);
        }
        let endpoint = Arc::clone(self);
        let address = address.clone();
        Box::pin(async move {
            let connection = endpoint.connection(&address.node).await?;
            send_on(&connection, address.name, payload, tell).await
        })
    }

    /// The cached gateway at `address` if `pick` accepts it and its proxy runs, or a new one.
    pub(super) fn proxy<G>(
        self: &Arc<Self>,
        address: &ActorAddress,
        pick: impl Fn(&LocalActor) -> Option<G>,
        make: impl FnOnce(Arc<Self>, ActorAddress) -> LocalActor,
    ) -> Option<G> {
        let mut proxies = lock(&self.proxies);
        if let Some(gateway) = proxies.get(address).and_then(&pick) {
            let alive = match proxies.get(address) {
                Some(LocalActor::JobManager(g)) => g.is_alive(),
                Some(LocalActor::ResourceManager(g)) => g.is_alive(),
                Some(LocalActor::TaskManager(g)) => g.is_alive(),
                None => false,
            };
            if alive {
                return Some(gateway);
            }
        }
        let actor = make(Arc::clone(self), address.clone());
        let gateway = pick(&actor);
        proxies.insert(address.clone(), actor);
        gateway
    }
}
