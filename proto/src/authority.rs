//! Makes a Unix-socket plugin reachable from gRPC clients that send the socket path as the
//! HTTP/2 `:authority`, as grpcurl (`grpcurl -plaintext -unix /run/karpenter/plugin.sock list`)
//! and other clients built on older grpc-go do. An absolute path is not a valid authority, and
//! the HTTP/2 server underneath tonic resets every such request with PROTOCOL_ERROR, so
//! operators debugging a live plugin would see nothing but errors.
//!
//! [`AuthorityFix`] wraps each accepted connection and reads its HTTP/2 frames. It looks at the
//! first request's header block: when the `:authority` is valid, it steps aside and passes
//! every byte through untouched (tonic clients, core-svc). When it is not, it rewrites every
//! header block of that connection: decodes it (HPACK, tracking the client's dynamic table),
//! replaces an invalid `:authority` with `localhost`, and re-encodes it as literals that
//! never touch the server's dynamic table, so both sides' HPACK state stays consistent.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::Connected;

/// The client connection preface that starts every HTTP/2 connection.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer must accept; rewritten blocks are split to fit it.
const MAX_FRAME_PAYLOAD: usize = 16_384;
/// A header block larger than this is refused rather than buffered.
const MAX_HEADER_BLOCK: usize = 1024 * 1024;
/// What replaces an invalid `:authority`.
const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";
/// The largest decoded header list rewritten, counted as HTTP/2 counts it (name, value and 32
/// per field). HPACK lets one byte stand for a whole dynamic-table entry, so without a bound a
/// block of a few bytes could decode to many megabytes; the server refuses lists above 16 KiB
/// (hyper's default `SETTINGS_MAX_HEADER_LIST_SIZE`) anyway, so nothing it would accept is cut.
const MAX_DECODED_HEADER_LIST: usize = 64 * 1024;
/// The HPACK dynamic table size the server advertises (HTTP/2's default, which hyper keeps): a
/// client may not grow its table beyond it, so neither may the copy decoded here.
const HEADER_TABLE_SIZE: usize = 4096;

/// An accepted connection whose incoming header blocks get a valid `:authority`.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    mode: Mode,
    /// Bytes read from the client, not yet processed.
    pending: Vec<u8>,
    /// Processed bytes, not yet handed to the server.
    ready: Vec<u8>,
    /// A header block being collected across HEADERS and CONTINUATION frames.
    block: Option<HeaderBlock>,
    decoder: loona_hpack::Decoder<'static>,
    eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before the connection preface has passed.
    Preface,
    /// Before the first header block: undecided.
    Inspect,
    /// Every header block is rewritten.
    Rewrite,
    /// The client sends valid authorities: bytes pass through untouched.
    PassThrough,
}

/// A decoded header field: name and value.
type Header = (Vec<u8>, Vec<u8>);

struct HeaderBlock {
    stream_id: [u8; 4],
    end_stream: bool,
    /// The frames as received, to pass through unchanged when nothing needs rewriting.
    raw_frames: Vec<u8>,
    fragment: Vec<u8>,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            mode: Mode::Preface,
            pending: Vec::new(),
            ready: Vec::new(),
            block: None,
            decoder: {
                let mut decoder = loona_hpack::Decoder::new();
                decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
                decoder
            },
            eof: false,
        }
    }

    /// Moves every complete unit of `pending` (the preface, or a frame) to `ready`, rewriting
    /// header blocks as the mode requires.
    fn process(&mut self) -> io::Result<()> {
        loop {
            match self.mode {
                Mode::PassThrough => {
                    self.ready.append(&mut self.pending);
                    return Ok(());
                }
                Mode::Preface => {
                    if self.pending.len() < PREFACE.len() {
                        return Ok(());
                    }
                    self.ready.extend(self.pending.drain(..PREFACE.len()));
                    self.mode = Mode::Inspect;
                }
                Mode::Inspect | Mode::Rewrite => {
                    if self.pending.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let length = usize::from(self.pending[0]) << 16
                        | usize::from(self.pending[1]) << 8
                        | usize::from(self.pending[2]);
                    if self.pending.len() < FRAME_HEADER_LEN + length {
                        return Ok(());
                    }
                    let frame: Vec<u8> = self.pending.drain(..FRAME_HEADER_LEN + length).collect();
                    self.frame(frame)?;
                }
            }
        }
    }

    fn frame(&mut self, frame: Vec<u8>) -> io::Result<()> {
        let frame_type = frame[3];
        let flags = frame[4];
        let payload = &frame[FRAME_HEADER_LEN..];
        match (frame_type, self.block.as_mut()) {
            (FRAME_HEADERS, None) => {
                let fragment = headers_fragment(flags, payload)?;
                self.block = Some(HeaderBlock {
                    stream_id: [frame[5], frame[6], frame[7], frame[8]],
                    end_stream: flags & FLAG_END_STREAM != 0,
                    raw_frames: frame.clone(),
                    fragment: fragment.to_vec(),
                });
            }
            (FRAME_CONTINUATION, Some(block)) => {
                block.raw_frames.extend_from_slice(&frame);
                block.fragment.extend_from_slice(payload);
            }
            (_, Some(_)) => return Err(invalid("a header block was interrupted by another frame")),
            (_, None) => {
                self.ready.extend_from_slice(&frame);
                return Ok(());
            }
        }
        if self
            .block
            .as_ref()
            .is_some_and(|b| b.fragment.len() > MAX_HEADER_BLOCK)
        {
            return Err(invalid("header block too large"));
        }
        if flags & FLAG_END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.header_block(block)?;
        }
        Ok(())
    }

    fn header_block(&mut self, block: HeaderBlock) -> io::Result<()> {
        let headers = match decode_bounded(&mut self.decoder, &block.fragment) {
            Ok(headers) => headers,
            // Undecided yet: let the HTTP/2 server see the original and report the error.
            Err(_) if self.mode == Mode::Inspect => {
                self.ready.extend_from_slice(&block.raw_frames);
                self.mode = Mode::PassThrough;
                return Ok(());
            }
            Err(message) => return Err(invalid(&message)),
        };
        let authority_is_valid = |headers: &[(Vec<u8>, Vec<u8>)]| {
            headers.iter().all(|(name, value)| {
                name != b":authority" || Authority::try_from(value.as_slice()).is_ok()
            })
        };
        if self.mode == Mode::Inspect {
            if authority_is_valid(&headers) {
                self.ready.extend_from_slice(&block.raw_frames);
                self.mode = Mode::PassThrough;
                return Ok(());
            }
            tracing::debug!(
                "client sends an invalid :authority (a socket path); rewriting it to localhost"
            );
            self.mode = Mode::Rewrite;
        }
        let mut encoded = Vec::with_capacity(block.fragment.len() * 2);
        for (name, value) in &headers {
            let value = if name == b":authority" && Authority::try_from(value.as_slice()).is_err() {
                REPLACEMENT_AUTHORITY
            } else {
                value.as_slice()
            };
            encode_literal_without_indexing(name, value, &mut encoded)?;
        }
        self.write_header_frames(&block, &encoded);
        Ok(())
    }

    fn write_header_frames(&mut self, block: &HeaderBlock, encoded: &[u8]) {
        if encoded.is_empty() {
            // An empty block still needs its HEADERS frame.
            self.write_frame(
                FRAME_HEADERS,
                FLAG_END_HEADERS | end_stream(block),
                block.stream_id,
                &[],
            );
            return;
        }
        let mut chunks = encoded.chunks(MAX_FRAME_PAYLOAD).peekable();
        let mut frame_type = FRAME_HEADERS;
        while let Some(chunk) = chunks.next() {
            let mut flags = if frame_type == FRAME_HEADERS {
                end_stream(block)
            } else {
                0
            };
            if chunks.peek().is_none() {
                flags |= FLAG_END_HEADERS;
            }
            self.write_frame(frame_type, flags, block.stream_id, chunk);
            frame_type = FRAME_CONTINUATION;
        }
    }

    fn write_frame(&mut self, frame_type: u8, flags: u8, stream_id: [u8; 4], payload: &[u8]) {
        let length = payload.len();
        // `length` is at most MAX_FRAME_PAYLOAD, so it fits the 24-bit field.
        self.ready.extend_from_slice(&[
            (length >> 16) as u8,
            (length >> 8) as u8,
            length as u8,
            frame_type,
            flags,
        ]);
        self.ready.extend_from_slice(&stream_id);
        self.ready.extend_from_slice(payload);
    }
}

fn end_stream(block: &HeaderBlock) -> u8 {
    if block.end_stream { FLAG_END_STREAM } else { 0 }
}

/// Decodes a header block, refusing one whose decoded list exceeds
/// [`MAX_DECODED_HEADER_LIST`]. The whole block is still decoded (the dynamic table must follow
/// the client's), but what is kept stays bounded.
fn decode_bounded(
    decoder: &mut loona_hpack::Decoder<'static>,
    fragment: &[u8],
) -> Result<Vec<Header>, String> {
    let mut headers = Vec::new();
    let mut size = 0usize;
    decoder
        .decode_with_cb(fragment, |name, value| {
            size = size.saturating_add(name.len() + value.len() + 32);
            if size <= MAX_DECODED_HEADER_LIST {
                headers.push((name.into_owned(), value.into_owned()));
            }
        })
        .map_err(|e| format!("undecodable header block: {e:?}"))?;
    if size > MAX_DECODED_HEADER_LIST {
        return Err(format!(
            "header list of {size} bytes decoded, more than {MAX_DECODED_HEADER_LIST}"
        ));
    }
    Ok(headers)
}

/// The header block fragment of a HEADERS frame's payload, without padding and priority.
fn headers_fragment(flags: u8, payload: &[u8]) -> io::Result<&[u8]> {
    let mut start = 0;
    let mut end = payload.len();
    if flags & FLAG_PADDED != 0 {
        let padding = usize::from(
            *payload
                .first()
                .ok_or_else(|| invalid("empty padded HEADERS frame"))?,
        );
        start += 1;
        end = end
            .checked_sub(padding)
            .ok_or_else(|| invalid("HEADERS padding longer than the frame"))?;
    }
    if flags & FLAG_PRIORITY != 0 {
        start += 5;
    }
    payload
        .get(start..end)
        .ok_or_else(|| invalid("HEADERS frame shorter than its flags say"))
}

/// HPACK "literal header field without indexing, new name" (RFC 7541 section 6.2.2), with
/// plain (not Huffman) strings.
fn encode_literal_without_indexing(name: &[u8], value: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    out.push(0x00);
    for string in [name, value] {
        loona_hpack::encoder::encode_integer_into(string.len(), 7, 0x00, out)?;
        out.extend_from_slice(string);
    }
    Ok(())
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 authority fix-up: {message}"),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                this.ready.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.mode == Mode::PassThrough && this.pending.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.eof {
                // Whatever is left is an incomplete frame; hand it over as it is and let the
                // HTTP/2 server judge it.
                this.ready.append(&mut this.pending);
                if this.ready.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut chunk = [0u8; 8192];
            let mut chunk_buf = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk_buf))?;
            if chunk_buf.filled().is_empty() {
                this.eof = true;
            } else {
                this.pending.extend_from_slice(chunk_buf.filled());
                this.process()?;
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: Connected> Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    type Headers = Vec<(&'static [u8], &'static [u8])>;

    fn request(authority: &'static [u8], path: &'static [u8]) -> Headers {
        vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
    }

    /// A client's bytes: the preface, a SETTINGS frame, then each request's header block as
    /// HEADERS (+ CONTINUATION when `split`), encoded with a dynamic table as grpc-go does.
    fn client_bytes(requests: &[Headers], split: bool) -> Vec<u8> {
        let mut encoder = loona_hpack::Encoder::new();
        let mut out = PREFACE.to_vec();
        out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // empty SETTINGS
        for (i, headers) in requests.iter().enumerate() {
            let block = encoder.encode(headers.iter().copied());
            let stream = [0, 0, 0, (2 * i + 1) as u8];
            let (first, rest) = if split {
                block.split_at(block.len() / 2)
            } else {
                (&block[..], &[][..])
            };
            let frame = |t: u8, f: u8, p: &[u8]| {
                let mut v = vec![0, 0, p.len() as u8, t, f];
                v.extend_from_slice(&stream);
                v.extend_from_slice(p);
                v
            };
            if split {
                out.extend(frame(FRAME_HEADERS, 0, first));
                out.extend(frame(FRAME_CONTINUATION, FLAG_END_HEADERS, rest));
            } else {
                out.extend(frame(FRAME_HEADERS, FLAG_END_HEADERS, first));
            }
        }
        out
    }

    async fn through_fix(input: Vec<u8>) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&input).await.unwrap();
        drop(client);
        let mut output = Vec::new();
        AuthorityFix::new(server)
            .read_to_end(&mut output)
            .await
            .unwrap();
        output
    }

    /// The header blocks a server decodes from `bytes` (after the preface).
    fn server_view(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        assert!(bytes.starts_with(PREFACE));
        let mut decoder = loona_hpack::Decoder::new();
        let mut rest = &bytes[PREFACE.len()..];
        let mut blocks = Vec::new();
        let mut fragment = Vec::new();
        while !rest.is_empty() {
            let length =
                usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let (frame_type, flags, payload) = (rest[3], rest[4], &rest[9..9 + length]);
            if frame_type == FRAME_HEADERS || frame_type == FRAME_CONTINUATION {
                fragment.extend_from_slice(payload);
                if flags & FLAG_END_HEADERS != 0 {
                    blocks.push(decoder.decode(&fragment).unwrap());
                    fragment.clear();
                }
            }
            rest = &rest[9 + length..];
        }
        blocks
    }

    fn authority_of(block: &[(Vec<u8>, Vec<u8>)]) -> &[u8] {
        &block.iter().find(|(n, _)| n == b":authority").unwrap().1
    }

    #[tokio::test]
    async fn a_socket_path_authority_becomes_localhost_in_every_request() {
        for split in [false, true] {
            let requests = [
                request(
                    b"/run/karpenter/plugin.sock",
                    b"/grpc.health.v1.Health/Check",
                ),
                // The second block refers to entries the first put in the client's table.
                request(
                    b"/run/karpenter/plugin.sock",
                    b"/grpc.health.v1.Health/Check",
                ),
            ];
            let blocks = server_view(&through_fix(client_bytes(&requests, split)).await);
            assert_eq!(blocks.len(), 2);
            for block in &blocks {
                assert_eq!(authority_of(block), b"localhost");
                let path = block
                    .iter()
                    .find(|(n, _)| n == b":path")
                    .map(|(_, v)| v.as_slice());
                assert_eq!(
                    path,
                    Some(&b"/grpc.health.v1.Health/Check"[..]),
                    "other headers kept"
                );
                assert_eq!(block.len(), 6);
            }
        }
    }

    #[tokio::test]
    async fn valid_authorities_pass_through_byte_for_byte() {
        let input = client_bytes(
            &[
                request(b"plugin.invalid", b"/a/B"),
                request(b"/not/looked/at", b"/a/C"),
            ],
            true,
        );
        assert_eq!(through_fix(input.clone()).await, input);
    }

    #[tokio::test]
    async fn a_truncated_stream_is_handed_over_as_it_is() {
        let mut input = client_bytes(&[request(b"/x.sock", b"/a/B")], false);
        input.extend_from_slice(&[0, 0, 50, FRAME_HEADERS]); // half a frame header
        let output = through_fix(input).await;
        assert!(output.ends_with(&[0, 0, 50, FRAME_HEADERS]));
    }
}
