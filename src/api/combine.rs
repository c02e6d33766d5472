//! A `flat_map` fused with the combiner of a keyed reduction whose keys it hands over by
//! reference: a key already in the table is found by `&Q` (a `&str` for a `String` key) and
//! never built; only a key seen for the first time since the last flush is made owned. Word
//! counts are the case: a word per token, mostly repeated.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use crate::base::hash::FixedHashMap;
use crate::operators::OperatorError;

use super::data::Key;
use super::keyed::{COMBINE_CAPACITY, flush};
use super::runtime::{BoxPush, Ctx, Push};

/// The user's function: a record and where to emit its `(key, value)`s.
pub(crate) type EmitFn<T, Q, A> = Arc<dyn Fn(T, &mut dyn FnMut(&Q, A)) + Send + Sync>;

/// See the module docs. Partial aggregates are `Option<A>` for the final merge that
/// `reduce_by_key` shares (`None` never leaves a table).
pub(crate) struct FlatMapCombine<T, K, Q: ?Sized, A> {
    pub f: EmitFn<T, Q, A>,
    pub reduce: Arc<dyn Fn(A, A) -> A + Send + Sync>,
    pub table: FixedHashMap<K, Option<A>>,
    pub next: BoxPush<(K, Option<A>)>,
}

impl<T, K, Q, A> Push<T> for FlatMapCombine<T, K, Q, A>
where
    K: Key + Borrow<Q>,
    Q: ?Sized + Hash + Eq + ToOwned<Owned = K>,
{
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let Self {
            f,
            reduce,
            table,
            next,
        } = self;
        let mut failed = None;
        f(record, &mut |key: &Q, value: A| {
            if failed.is_some() {
                return;
            }
            if let Some(acc) = table.get_mut(key) {
                *acc = Some(match acc.take() {
                    Some(a) => reduce(a, value),
                    None => value,
                });
                return;
            }
            if table.len() >= COMBINE_CAPACITY
                && let Err(error) = flush(table, next, cx)
            {
                failed = Some(error);
                return;
            }
            table.insert(key.to_owned(), Some(value));
        });
        failed.map_or(Ok(()), Err)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        flush(&mut self.table, &mut self.next, cx)?;
        self.next.end(cx)
    }
}
