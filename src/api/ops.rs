//! The record-at-a-time operators: map, filter, flat_map, union, pass-through. Each is a
//! [`Push`] into its downstream; chained, a record goes through all of them by value.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::operators::OperatorError;

use super::data::Data;
use super::plan::{FnNode, Instance, NodeContext, NodeRuntime};
use super::runtime::{BoxPush, Ctx, Outputs, Push, downstream, erase};

/// A one-input node whose push is made from its downstream by `make`.
pub(crate) fn one_input<T, U, F>(make: F) -> Arc<dyn NodeRuntime>
where
    T: Data,
    U: Data,
    F: Fn(&NodeContext, BoxPush<U>) -> Result<BoxPush<T>, OperatorError> + Send + Sync + 'static,
{
    Arc::new(FnNode(move |cx: &NodeContext, outputs: Outputs| {
        let push = make(cx, downstream::<U>(outputs))?;
        Ok(Instance::Ports(vec![erase(push)]))
    }))
}

/// `map`.
pub(crate) struct Map<T, U> {
    pub f: Arc<dyn Fn(T) -> U + Send + Sync>,
    pub next: BoxPush<U>,
}

impl<T, U> Push<T> for Map<T, U> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.push((self.f)(record), cx)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.end(cx)
    }

    fn is_done(&self) -> bool {
        self.next.is_done()
    }
}

/// `filter`.
pub(crate) struct Filter<T> {
    pub f: Arc<dyn Fn(&T) -> bool + Send + Sync>,
    pub next: BoxPush<T>,
}

impl<T> Push<T> for Filter<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if (self.f)(&record) {
            self.next.push(record, cx)
        } else {
            Ok(())
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.end(cx)
    }

    fn is_done(&self) -> bool {
        self.next.is_done()
    }
}

/// `flat_map`: any iterator per record.
pub(crate) struct FlatMap<T, U, I> {
    pub f: Arc<dyn Fn(T) -> I + Send + Sync>,
    pub next: BoxPush<U>,
}

impl<T, U, I: IntoIterator<Item = U>> Push<T> for FlatMap<T, U, I> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for out in (self.f)(record) {
            self.next.push(out, cx)?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.end(cx)
    }

    fn is_done(&self) -> bool {
        self.next.is_done()
    }
}

/// Passes records on unchanged (where a repartitioning needs a node of its own).
pub(crate) struct Identity<T> {
    pub next: BoxPush<T>,
}

impl<T> Push<T> for Identity<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.push(record, cx)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.end(cx)
    }

    fn is_done(&self) -> bool {
        self.next.is_done()
    }
}

/// A pass-through node.
pub(crate) fn identity<T: Data>() -> Arc<dyn NodeRuntime> {
    one_input::<T, T, _>(|_, next| Ok(Box::new(Identity { next })))
}

/// Shared by the inputs of a union: their common downstream, ended once every input has.
struct UnionState<T> {
    next: BoxPush<T>,
    open: usize,
}

/// One input of a union.
struct UnionPort<T> {
    state: Rc<RefCell<UnionState<T>>>,
}

impl<T> Push<T> for UnionPort<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.state.borrow_mut().next.push(record, cx)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut state = self.state.borrow_mut();
        state.open -= 1;
        if state.open == 0 {
            state.next.end(cx)?;
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.state.borrow().next.is_done()
    }
}

/// A union of `inputs` inputs of the same type.
pub(crate) fn union<T: Data>(inputs: usize) -> Arc<dyn NodeRuntime> {
    Arc::new(FnNode(move |_: &NodeContext, outputs: Outputs| {
        let state = Rc::new(RefCell::new(UnionState {
            next: downstream::<T>(outputs),
            open: inputs,
        }));
        let ports = (0..inputs)
            .map(|_| {
                let port: BoxPush<T> = Box::new(UnionPort {
                    state: state.clone(),
                });
                erase(port)
            })
            .collect();
        Ok(Instance::Ports(ports))
    }))
}
