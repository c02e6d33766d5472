//! The typed protocol: one file per receiving actor, plus the ids and types they share.
//!
//! Every message derives `Serialize`/`Deserialize` so the same values travel in-process (actix
//! mailboxes) and between processes (the transport encodes them with [`crate::base::codec`]). Wire enums
//! use serde's default externally tagged form, which bincode can decode.
//!
//! For each receiving actor, the `protocol!` macro makes two things from one list:
//! - the **wire enum** (`JobManagerMessage`, ...): every message that actor accepts, the payload of
//!   a transport envelope;
//! - the **gateway** (`JobManagerGateway`, ...): one typed `Recipient` per message. Actors hold
//!   gateways, never `Addr`s of their peers, so a test can plug in a probe and the transport a
//!   remote proxy without the actor noticing.

pub mod buffer;
pub mod common;
pub mod deployment;
pub mod job_manager;
pub mod payload;
pub mod reply;
pub mod resource_manager;
pub mod subpartition_set;
pub mod task_manager;

pub use common::*;

/// Samples of every message, shared with the protocol's other tests.
#[cfg(test)]
pub(crate) mod tests;

/// Declares a receiving actor's wire enum and gateway from one list of its messages.
macro_rules! protocol {
    (
        $(#[$wire_meta:meta])*
        wire $wire:ident;
        $(#[$gateway_meta:meta])*
        gateway $gateway:ident {
            $( $(#[$field_meta:meta])* $field:ident: $message:ident ),+ $(,)?
        }
    ) => {
        $(#[$wire_meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub enum $wire {
            $( $(#[$field_meta])* $message($message), )+
        }

        impl $wire {
            /// The name of the message inside, for logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$message(_) => stringify!($message), )+
                }
            }

            /// Hands the message to its recipient in `gateway` (the transport's inbound
            /// dispatch). The message is queued in the actor's mailbox before this returns, so
            /// messages delivered one after another keep their order; the future only waits for
            /// the answer, wrapped for the wire. `Err` means the actor's mailbox is closed.
            pub fn deliver(
                self,
                gateway: &$gateway,
            ) -> std::pin::Pin<
                Box<
                    dyn std::future::Future<
                        Output = Result<$crate::messages::reply::Reply, actix::MailboxError>,
                    >,
                >,
            > {
                match self {
                    $(
                        Self::$message(message) => {
                            let request = gateway.$field.send(message);
                            Box::pin(async move {
                                request
                                    .await
                                    .map($crate::messages::reply::Answer::into_reply)
                            })
                        }
                    )+
                }
            }
        }

        $(
            impl From<$message> for $wire {
                fn from(message: $message) -> Self {
                    Self::$message(message)
                }
            }
        )+

        $(#[$gateway_meta])*
        #[derive(Clone)]
        pub struct $gateway {
            $( $(#[$field_meta])* pub $field: actix::Recipient<$message>, )+
        }

        impl $gateway {
            /// Whether the actor behind the gateway still runs (all its recipients share one
            /// mailbox).
            pub fn is_alive(&self) -> bool {
                true $( && self.$field.connected() )+
            }

            /// The gateway of an actor in this process.
            pub fn of<A>(addr: &actix::Addr<A>) -> Self
            where
                A: actix::Actor<Context = actix::Context<A>> $( + actix::Handler<$message> )+,
            {
                Self { $( $field: addr.clone().recipient(), )+ }
            }
        }

        impl std::fmt::Debug for $gateway {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($gateway))
            }
        }
    };
}
pub(crate) use protocol;
