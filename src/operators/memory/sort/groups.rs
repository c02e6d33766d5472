//! Group-reduce on top of the sorter: all records of one key handed to a function together.
//!
//! The records of a group reach the function as an iterator over the sorted stream, never as
//! a collection, so one key's group may be larger than the budget (Flink's GroupReduceFunction
//! gets an `Iterable` for the same reason).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::error::SpillError;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::sort::{ExternalSorter, SortOrder, SortedIter};

/// The records of one key, in arrival order, read from the sorted stream as the reduce function
/// asks for them. Records it does not read are skipped.
pub struct Group<'a, T, K> {
    key: &'a K,
    first: Option<T>,
    stream: &'a mut SortedIter<T, K>,
    /// Where the first record of the next group goes when this group meets it.
    lookahead: &'a mut Option<(K, T)>,
    /// Where a read error goes; the reduce function sees the group end early, the caller of
    /// `for_each_group` gets the error.
    error: &'a mut Option<SpillError>,
    ended: bool,
}

impl<T: DeserializeOwned, K: Ord> Iterator for Group<'_, T, K> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.ended {
            return None;
        }
        match self.stream.next_keyed() {
            Some(Ok((key, value))) if key == *self.key => Some(value),
            Some(Ok(next)) => {
                *self.lookahead = Some(next);
                self.ended = true;
                None
            }
            Some(Err(error)) => {
                *self.error = Some(error);
                self.ended = true;
                None
            }
            None => {
                self.ended = true;
                None
            }
        }
    }
}

impl<T: DeserializeOwned, K: Ord> SortedIter<T, K> {
    /// Calls `reduce` once per key, in key order, with the key and its records. A spill error
    /// ends the iteration and is returned (converted into `E`), even if `reduce` returned an
    /// error of its own for the group it cut short; otherwise `reduce`'s first error is.
    pub fn for_each_group<E, F>(mut self, mut reduce: F) -> Result<(), E>
    where
        E: From<SpillError>,
        F: FnMut(&K, &mut Group<'_, T, K>) -> Result<(), E>,
    {
        let mut lookahead = match self.next_keyed() {
            None => return Ok(()),
            Some(first) => Some(first?),
        };
        while let Some((key, first)) = lookahead.take() {
            let mut error = None;
            let mut group = Group {
                key: &key,
                first: Some(first),
                stream: &mut self,
                lookahead: &mut lookahead,
                error: &mut error,
                ended: false,
            };
            let result = reduce(&key, &mut group);
            group.for_each(drop);
            if let Some(error) = error {
                return Err(error.into());
            }
            result?;
        }
        Ok(())
    }
}

/// Group-reduce: buffers (and spills) records like an [`ExternalSorter`], then hands each key's
/// records to a function together.
pub struct GroupReducer<T, K> {
    sorter: ExternalSorter<T, K>,
}

impl<T, K> GroupReducer<T, K>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    K: Ord + Serialize + Send + 'static,
{
    /// A group-reduce by `key_fn`; groups come in ascending key order.
    pub fn new(options: SpillOptions, key_fn: impl Fn(&T) -> K + Send + Sync + 'static) -> Self {
        Self {
            sorter: ExternalSorter::new(options, key_fn),
        }
    }

    /// Groups come in `order` instead.
    pub fn with_order(self, order: SortOrder) -> Self {
        Self {
            sorter: self.sorter.with_order(order),
        }
    }

    /// Adds a record.
    pub fn push(&mut self, record: T) -> Result<(), SpillError> {
        self.sorter.push(record)
    }

    /// Ends the input and calls `reduce` for each key (see [`SortedIter::for_each_group`]).
    pub fn finish<E, F>(self, reduce: F) -> Result<(), E>
    where
        E: From<SpillError>,
        F: FnMut(&K, &mut Group<'_, T, K>) -> Result<(), E>,
    {
        self.sorter.finish()?.for_each_group(reduce)
    }
}
