//! `symmGroupStart` / `symmGroupEnd`. Inside a group, collective host calls
//! (symmMemAlloc, symmMemFree, symmCommRegister) are queued instead of run;
//! `symmGroupEnd` runs each communicator's queue on its own thread, so that
//! one thread can drive every GPU of a symmCommInitAll group without
//! deadlocking on itself. Outputs of queued calls are written at GroupEnd.
//! Stream-ordered calls never block the host and run at once.

use std::cell::RefCell;
use std::sync::Arc;

use crate::comm::Comm;
use crate::error::{err, Error, Result};

type Op = Box<dyn FnOnce() -> Result<()> + Send>;

struct Deferred {
    comm: Arc<Comm>,
    api: &'static str,
    run: Op,
}

#[derive(Default)]
struct Group {
    depth: u32,
    ops: Vec<Deferred>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// True between symmGroupStart and the matching symmGroupEnd on this thread.
pub fn active() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Queue `run` until the outermost symmGroupEnd.
pub fn defer(comm: Arc<Comm>, api: &'static str, run: Op) {
    GROUP.with(|g| g.borrow_mut().ops.push(Deferred { comm, api, run }));
}

/// Leave one level; at the outermost, run what was queued. Every failure is
/// recorded on its communicator; the first is returned.
pub fn end() -> Result<()> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(err!(symmInvalidUsage, "symmGroupEnd without a matching symmGroupStart"));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 { std::mem::take(&mut g.ops) } else { Vec::new() })
    })?;
    run_all(ops)
}

fn run_all(ops: Vec<Deferred>) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    // One queue per communicator, in call order.
    let mut queues: Vec<Vec<Deferred>> = Vec::new();
    for op in ops {
        match queues.iter_mut().find(|q| Arc::ptr_eq(&q[0].comm, &op.comm)) {
            Some(q) => q.push(op),
            None => queues.push(vec![op]),
        }
    }
    let run_queue = |q: Vec<Deferred>| -> Vec<Error> {
        let mut errors = Vec::new();
        for d in q {
            if let Err(e) = (d.run)() {
                let e = Error::new(e.code, format!("{} (rank {}): {}", d.api, d.comm.rank, e.msg));
                d.comm.set_last_error(std::ffi::CString::new(e.msg.replace('\0', " ")).unwrap_or_default());
                errors.push(e);
            }
        }
        errors
    };
    let errors: Vec<Error> = if queues.len() == 1 {
        run_queue(queues.pop().expect("one queue"))
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = queues.into_iter().map(|q| s.spawn(move || run_queue(q))).collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|_| vec![err!(symmInternalError, "group worker panicked")]))
                .collect()
        })
    };
    match errors.into_iter().next() {
        None => Ok(()),
        Some(e) => Err(e),
    }
}
