//! `symmGroupStart` / `symmGroupEnd`. Inside a group, collective host calls
//! (symmMemAlloc, symmMemFree, symmCommRegister) are queued instead of run;
//! `symmGroupEnd` runs each communicator's queue on its own thread, so that
//! one thread can drive every GPU of a symmCommInitAll group without
//! deadlocking on itself. Outputs of queued calls are written at GroupEnd.
//! Stream-ordered calls never block the host and run at once.

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::driver::sys::CUstream;

use crate::comm::Comm;
use crate::cuda::abi::P2POp;
use crate::error::{err, Error, Result};

type Op = Box<dyn FnOnce() -> Result<()> + Send>;

struct Deferred {
    comm: Arc<Comm>,
    api: &'static str,
    run: Op,
}

/// Sends and receives of one communicator on one stream, in call order.
struct P2PBatch {
    comm: Arc<Comm>,
    stream: usize,
    ops: Vec<P2POp>,
}

#[derive(Default)]
struct Group {
    depth: u32,
    ops: Vec<Deferred>,
    p2p: Vec<P2PBatch>,
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

/// Queue a send or receive until the outermost symmGroupEnd.
pub fn defer_p2p(comm: Arc<Comm>, stream: CUstream, op: P2POp) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        let key = stream as usize;
        match g.p2p.iter_mut().find(|b| Arc::ptr_eq(&b.comm, &comm) && b.stream == key) {
            Some(b) => b.ops.push(op),
            None => g.p2p.push(P2PBatch { comm, stream: key, ops: vec![op] }),
        }
    });
}

/// Leave one level; at the outermost, run what was queued: host calls
/// first (one thread per communicator), then each communicator's sends and
/// receives as combined launches. Every failure is recorded on its
/// communicator; the first is returned.
pub fn end() -> Result<()> {
    let (ops, p2p) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(err!(symmInvalidUsage, "symmGroupEnd without a matching symmGroupStart"));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 { (std::mem::take(&mut g.ops), std::mem::take(&mut g.p2p)) } else { Default::default() })
    })?;
    let host = run_all(ops);
    let mut first = host.err();
    for b in p2p {
        if let Err(e) = crate::coll::p2p::launch_send_recv(&b.comm, b.stream as CUstream, &b.ops) {
            let e = Error::new(e.code, format!("symmGroupEnd: send/recv (rank {}): {}", b.comm.rank, e.msg));
            b.comm.set_last_error(std::ffi::CString::new(e.msg.replace('\0', " ")).unwrap_or_default());
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
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
