//! Hooks for this crate's own tests (feature `testing`, enabled only by its dev-dependency):
//! the private [`AuthorityFix`](crate::authority) driven over bytes in memory, so the fuzz
//! tests can feed it any byte stream, cut anywhere.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};

use crate::authority::AuthorityFix;

/// What the server side reads when a client sends `chunks` (each arriving in one read, then
/// end of stream) through the `:authority` fix-up: every byte it hands over, or the error that
/// ends the connection. The reads are polled synchronously: the source is always ready, so a
/// read that stays pending is a bug, reported as an error.
pub fn through_authority_fix(chunks: &[Vec<u8>], read_size: usize) -> io::Result<Vec<u8>> {
    let mut fix = AuthorityFix::new(Chunks {
        chunks: chunks.iter().rev().cloned().collect(),
    });
    let mut cx = Context::from_waker(Waker::noop());
    let mut output = Vec::new();
    let mut buffer = vec![0u8; read_size.max(1)];
    loop {
        let mut read = ReadBuf::new(&mut buffer);
        match Pin::new(&mut fix).poll_read(&mut cx, &mut read) {
            Poll::Ready(Ok(())) if read.filled().is_empty() => return Ok(output),
            Poll::Ready(Ok(())) => output.extend_from_slice(read.filled()),
            Poll::Ready(Err(error)) => return Err(error),
            Poll::Pending => {
                return Err(io::Error::other(
                    "a read over a ready source stayed pending",
                ));
            }
        }
    }
}

/// A source that yields its chunks one read at a time (a chunk larger than the reader's buffer
/// is split), then end of stream.
struct Chunks {
    /// In reverse order, so the next one pops off the end.
    chunks: Vec<Vec<u8>>,
}

impl AsyncRead for Chunks {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while let Some(mut chunk) = this.chunks.pop() {
            if chunk.is_empty() {
                continue;
            }
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                this.chunks.push(chunk.split_off(n));
            }
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(Ok(()))
    }
}
