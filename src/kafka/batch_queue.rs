//! Batched reads from librdkafka's consumer queue (`rd_kafka_consume_batch_queue`), and how large
//! one fetch's batch may grow ([`BatchLimit`]).
//!
//! Hand-rolled over rdkafka's raw bindings because rust-rdkafka's `BaseConsumer::poll` takes one
//! event per call, with a clock read and an `Arc` allocation per message; on the replay hot path
//! that was the fetcher thread's largest cost after the copies themselves. Everything else
//! (assignment, positions, pause/resume) still goes through rust-rdkafka's safe API on the same
//! consumer. Each message is lent to a callback as a [`MessageView`] and destroyed right after it,
//! unless the callback keeps its value ([`MessageView::lend_payload`]): then the message lives as
//! long as that value, a `Bytes` over librdkafka's buffer, and the record carries no copy.
//!
//! librdkafka's main queue (its logs, client-wide errors, statistics) is read apart, as events,
//! as rust-rdkafka's own poll would: forwarded to the consumer queue, as rust-rdkafka sets it up,
//! those were served inside `rd_kafka_consume_batch_queue` by callbacks rust-rdkafka never sets,
//! so librdkafka printed them itself, raw on stderr ("%3|…|ERROR|tidegate-reader-0#consumer-1|
//! … 1/1 brokers are down", every few hundred milliseconds of an outage), past the logs'
//! format and filters and past [`TracingContext`]'s account of a broker's troubles. Not with
//! SASL OAUTHBEARER: its token refresh also travels on the main queue, and as an event nothing
//! would serve it (rust-rdkafka's context would need to generate tokens), where the batch read
//! runs it.

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;

use crate::client::TracingContext;
use crate::record::Header;

/// The consumer a queue's messages came from, shared by the messages lent out: librdkafka's
/// `rd_kafka_destroy` waits for every message of its client to be destroyed, so the consumer is
/// destroyed after the last of them, wherever that is dropped.
pub type SharedConsumer = Arc<BaseConsumer<TracingContext>>;

/// A message, borrowed from librdkafka for the length of a callback.
pub struct MessageView<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    headers: *mut rd::rd_kafka_headers_t,
    message: *mut rd::rd_kafka_message_t,
    /// Set once the message is lent out: the read does not destroy it.
    kept: &'a Cell<bool>,
    consumer: &'a SharedConsumer,
}

/// The smallest value lent rather than copied. A kept message holds librdkafka's op (a few
/// hundred bytes) besides its value: lending 100-byte values saved no CPU we could measure and
/// raised the trading day's peak RSS by 8 MiB, where 1 KiB values took 17 % less CPU
/// (docs/performance.md, "Values lent from librdkafka").
pub const LEND_FROM: usize = 512;

/// A message kept past its read, for a value lent out of it ([`MessageView::lend_payload`]).
struct LentMessage {
    message: *mut rd::rd_kafka_message_t,
    payload: *const u8,
    len: usize,
    /// Taken in Drop: the last message of a reader that went before it closes the consumer.
    consumer: Option<SharedConsumer>,
}

// SAFETY: librdkafka's messages may be read and destroyed from any thread (their buffers are
// reference counted atomically); nothing mutates the payload once librdkafka returned it.
unsafe impl Send for LentMessage {}

impl AsRef<[u8]> for LentMessage {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the payload belongs to the message, alive until this value's Drop.
        unsafe { std::slice::from_raw_parts(self.payload, self.len) }
    }
}

impl Drop for LentMessage {
    fn drop(&mut self) {
        // SAFETY: kept, not destroyed, by the read that lent it out (`kept`); destroyed once, before
        // the consumer reference below is released.
        unsafe { rd::rd_kafka_message_destroy(self.message) }
        // the last reference, its reader gone: the consumer's close (a poll until librdkafka
        // says it is closed, then its threads joined) is not for the thread that happened to
        // drop this value (a sink before its final checkpoint, a runtime's worker)
        if let Some(last) = self.consumer.take().and_then(Arc::into_inner) {
            close_elsewhere(last);
        }
    }
}

/// Close and destroy `consumer` on a thread of its own; in place if none can be started (a
/// failed spawn drops its closure, and the consumer with it, here).
fn close_elsewhere(consumer: BaseConsumer<TracingContext>) {
    let _ = std::thread::Builder::new()
        .name("tidegate-close".into())
        .spawn(move || drop(consumer));
}

impl MessageView<'_> {
    /// The value without a copy: a `Bytes` over librdkafka's buffer, the message kept alive (not
    /// destroyed after the callback) until the last clone of the value is dropped. Holding it
    /// holds the buffer the message points into: the fetch answer, or its decompressed batch. A
    /// second call copies.
    pub fn lend_payload(&self) -> Option<Bytes> {
        let payload = self.payload?;
        if payload.is_empty() {
            return Some(Bytes::new());
        }
        if payload.len() < LEND_FROM || self.kept.replace(true) {
            return Some(Bytes::copy_from_slice(payload));
        }
        Some(Bytes::from_owner(LentMessage {
            message: self.message,
            payload: payload.as_ptr(),
            len: payload.len(),
            consumer: Some(Arc::clone(self.consumer)),
        }))
    }

    /// The headers, copied.
    pub fn headers(&self) -> Vec<Header> {
        if self.headers.is_null() {
            return Vec::new();
        }
        // SAFETY: the headers belong to the message, alive for the view's lifetime.
        unsafe {
            let count = rd::rd_kafka_header_cnt(self.headers);
            let mut out = Vec::with_capacity(count);
            for idx in 0..count {
                let mut name = std::ptr::null();
                let mut value = std::ptr::null();
                let mut size = 0usize;
                if rd::rd_kafka_header_get_all(self.headers, idx, &mut name, &mut value, &mut size)
                    == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    out.push(Header {
                        key: CStr::from_ptr(name).to_string_lossy().into_owned(),
                        value: (!value.is_null())
                            .then(|| std::slice::from_raw_parts(value as *const u8, size).to_vec()),
                    });
                }
            }
            out
        }
    }
}

/// What a batch read yields, in queue order.
pub enum Event<'a> {
    Message(MessageView<'a>),
    /// The partition's fetch position reached the end of its log (or its last stable offset).
    PartitionEof {
        topic: &'a str,
        partition: i32,
        /// The end: the offset the next record will have.
        offset: i64,
    },
    /// A consumer error: librdkafka's code and description.
    Error {
        code: RDKafkaRespErr,
        message: String,
        topic: &'a str,
        partition: i32,
    },
}

/// The consumer queue of a consumer (which must have a `group.id`, so rust-rdkafka forwarded
/// its main queue to it).
pub struct ConsumerQueue {
    queue: *mut rd::rd_kafka_queue_t,
    /// The consumer, for the messages lent out to keep alive.
    consumer: SharedConsumer,
    /// librdkafka's main queue, no longer forwarded to `queue` (see the module's doc); null when
    /// it stays forwarded.
    main: *mut rd::rd_kafka_queue_t,
    /// Who hears the main queue's events: the consumer's context.
    context: Arc<TracingContext>,
    buffer: Vec<*mut rd::rd_kafka_message_t>,
    /// The same queue for [`QueueWaker`]s, cleared before the queue is released.
    shared: Arc<Mutex<Option<QueuePtr>>>,
}

struct QueuePtr(*mut rd::rd_kafka_queue_t);

// SAFETY: rd_kafka_queue_yield is thread-safe; the pointer is only used under the mutex, while
// the owning ConsumerQueue has not released the queue.
unsafe impl Send for QueuePtr {}

/// Cuts a blocked [`ConsumerQueue::read`] short from another thread (a fetcher that must see a
/// new task, its shutdown above all, now rather than at the end of its poll timeout). Does
/// nothing once the queue is gone.
#[derive(Clone)]
pub struct QueueWaker(Arc<Mutex<Option<QueuePtr>>>);

impl QueueWaker {
    pub fn wake(&self) {
        let guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = guard.as_ref() {
            // SAFETY: the queue is alive while it is in the mutex (see ConsumerQueue's Drop).
            unsafe { rd::rd_kafka_queue_yield(q.0) }
        }
    }
}

// SAFETY: librdkafka queues are thread-safe; the pointers are only used by the thread that owns
// this value (a fetcher), and the consumer outlives it (it holds a reference).
unsafe impl Send for ConsumerQueue {}

impl ConsumerQueue {
    /// The consumer queue of `consumer`; `None` if librdkafka has none (no `group.id`). With
    /// `serve_main`, librdkafka's main queue is read apart (see the module's doc).
    pub fn new(consumer: &SharedConsumer, batch: usize, serve_main: bool) -> Option<Self> {
        use rdkafka::consumer::Consumer;
        let client = consumer.client().native_ptr();
        // SAFETY: the client pointer is valid for the consumer's lifetime; the returned queues
        // hold their own references and are released in Drop.
        let queue = unsafe { rd::rd_kafka_queue_get_consumer(client) };
        if queue.is_null() {
            return None;
        }
        // SAFETY: as above; unforwarding a queue is allowed at any time (its ops stay in it)
        let main = if serve_main {
            unsafe {
                let main = rd::rd_kafka_queue_get_main(client);
                rd::rd_kafka_queue_forward(main, std::ptr::null_mut());
                main
            }
        } else {
            std::ptr::null_mut()
        };
        Some(ConsumerQueue {
            queue,
            consumer: Arc::clone(consumer),
            main,
            context: Arc::clone(consumer.client().context()),
            buffer: vec![std::ptr::null_mut(); batch.max(1)],
            shared: Arc::new(Mutex::new(Some(QueuePtr(queue)))),
        })
    }

    /// Hand the main queue's events to the consumer's context, as rust-rdkafka's poll would: logs,
    /// errors, statistics; at most [`MAIN_EVENTS_PER_READ`], so a flood of logs (`debug` set)
    /// does not hold up the records. (A fatal error comes on the consumer queue, as a message.)
    fn serve_main(&mut self) {
        if self.main.is_null() {
            return;
        }
        for _ in 0..MAIN_EVENTS_PER_READ {
            // SAFETY: the main queue reference is ours until Drop; each event is destroyed once,
            // and the strings it lends are copied before that
            unsafe {
                let event = rd::rd_kafka_queue_poll(self.main, 0);
                if event.is_null() {
                    return;
                }
                match rd::rd_kafka_event_type(event) {
                    rd::RD_KAFKA_EVENT_LOG => {
                        let (mut facility, mut text, mut level) = (std::ptr::null(), std::ptr::null(), 0);
                        if rd::rd_kafka_event_log(event, &mut facility, &mut text, &mut level) == 0 {
                            let facility = text_of(facility);
                            self.context
                                .log(log_level(level), facility.trim(), text_of(text).trim());
                        }
                    }
                    rd::RD_KAFKA_EVENT_ERROR => {
                        let code = rd::rd_kafka_event_error(event);
                        let reason = text_of(rd::rd_kafka_event_error_string(event));
                        self.context.error(KafkaError::Global(code.into()), reason.trim());
                    }
                    rd::RD_KAFKA_EVENT_STATS => {
                        let json = rd::rd_kafka_event_stats(event);
                        if !json.is_null() {
                            self.context.stats_raw(CStr::from_ptr(json).to_bytes());
                        }
                    }
                    _ => {}
                }
                rd::rd_kafka_event_destroy(event);
            }
        }
    }

    /// A waker for reads of this queue.
    pub fn waker(&self) -> QueueWaker {
        QueueWaker(Arc::clone(&self.shared))
    }

    /// Up to `max` events (at most the buffer's size), waiting up to `timeout` for the first; each
    /// is handed to `f` while librdkafka still owns it (a message whose value `f` kept, until
    /// that value is dropped). Returns how many there were.
    pub fn read(&mut self, timeout: Duration, max: usize, mut f: impl FnMut(Event<'_>)) -> usize {
        self.serve_main();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let len = max.clamp(1, self.buffer.len());
        // SAFETY: the buffer has room for `len` pointers; librdkafka fills the first `n`.
        let n = unsafe { rd::rd_kafka_consume_batch_queue(self.queue, ms, self.buffer.as_mut_ptr(), len) };
        let n = n.max(0) as usize;
        let kept = Cell::new(false);
        let mut unread = Unread {
            messages: &self.buffer[..n],
            next: 0,
            kept: &kept,
        };
        while unread.next < n {
            let msg = unread.messages[unread.next];
            kept.set(false);
            // SAFETY: librdkafka returned `n` valid messages; each is viewed once, then destroyed
            // unless lent out (its owner destroys it then).
            unsafe {
                f(view(msg, &kept, &self.consumer));
                unread.next += 1;
                if !kept.get() {
                    rd::rd_kafka_message_destroy(msg);
                }
            }
        }
        n
    }
}

/// The messages of a read not yet handed on, destroyed if the callback panics: a message never
/// destroyed would hang the consumer's destroy (librdkafka waits for them), and a fetcher's panic
/// is caught, the job's teardown going on to that destroy.
struct Unread<'a> {
    messages: &'a [*mut rd::rd_kafka_message_t],
    /// The message being handed on (the callback's), then the rest.
    next: usize,
    /// Whether the callback lent out the one it was given.
    kept: &'a Cell<bool>,
}

impl Drop for Unread<'_> {
    fn drop(&mut self) {
        let Some(current) = self.messages.get(self.next) else {
            return;
        };
        let rest = &self.messages[self.next + 1..];
        // SAFETY: messages of the read that were neither destroyed nor lent out (the one the
        // callback panicked on, unless it was lent before), each destroyed once.
        unsafe {
            if !self.kept.get() {
                rd::rd_kafka_message_destroy(*current);
            }
            for m in rest {
                rd::rd_kafka_message_destroy(*m);
            }
        }
    }
}

impl Drop for ConsumerQueue {
    fn drop(&mut self) {
        // no waker may use the queue from here on
        self.shared.lock().unwrap_or_else(|p| p.into_inner()).take();
        // SAFETY: the queue references obtained in `new`, released once. The main queue goes back
        // to the consumer queue first, with what it holds, for rust-rdkafka's close to serve.
        unsafe {
            if !self.main.is_null() {
                rd::rd_kafka_queue_forward(self.main, self.queue);
                rd::rd_kafka_queue_destroy(self.main);
            }
            rd::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// How many main-queue events one read serves at most.
const MAIN_EVENTS_PER_READ: usize = 1000;

/// A C string of librdkafka's, copied ("" for none).
///
/// # Safety
/// `text` must be null or a valid C string.
unsafe fn text_of(text: *const std::ffi::c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    CStr::from_ptr(text).to_string_lossy().into_owned()
}

/// librdkafka's syslog level as rust-rdkafka names it (its own conversion is private).
fn log_level(level: i32) -> RDKafkaLogLevel {
    match level {
        0 => RDKafkaLogLevel::Emerg,
        1 => RDKafkaLogLevel::Alert,
        2 => RDKafkaLogLevel::Critical,
        3 => RDKafkaLogLevel::Error,
        4 => RDKafkaLogLevel::Warning,
        5 => RDKafkaLogLevel::Notice,
        6 => RDKafkaLogLevel::Info,
        _ => RDKafkaLogLevel::Debug,
    }
}

/// A view of a message.
///
/// # Safety
/// `message` must be a valid message returned by librdkafka, not destroyed while the view lives.
unsafe fn view<'a>(
    message: *mut rd::rd_kafka_message_t,
    kept: &'a Cell<bool>,
    consumer: &'a SharedConsumer,
) -> Event<'a> {
    let m: &'a rd::rd_kafka_message_t = &*message;
    let topic = if m.rkt.is_null() {
        ""
    } else {
        CStr::from_ptr(rd::rd_kafka_topic_name(m.rkt)).to_str().unwrap_or("")
    };
    if m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        if m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF {
            return Event::PartitionEof {
                topic,
                partition: m.partition,
                offset: m.offset,
            };
        }
        let text = rd::rd_kafka_message_errstr(m);
        let message = if text.is_null() {
            CStr::from_ptr(rd::rd_kafka_err2str(m.err))
                .to_string_lossy()
                .into_owned()
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        };
        return Event::Error {
            code: m.err,
            message,
            topic,
            partition: m.partition,
        };
    }
    let bytes = |ptr: *mut std::ffi::c_void, len: usize| {
        (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr as *const u8, len))
    };
    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    let ts = rd::rd_kafka_message_timestamp(m, &mut kind);
    let timestamp = (kind != rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts >= 0).then_some(ts);
    let mut headers: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    if rd::rd_kafka_message_headers(m, &mut headers) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        headers = std::ptr::null_mut();
    }
    Event::Message(MessageView {
        topic,
        partition: m.partition,
        offset: m.offset,
        timestamp,
        key: bytes(m.key, m.key_len),
        payload: bytes(m.payload, m.len),
        headers,
        message,
        kept,
        consumer,
    })
}

/// How large one fetch's batch may grow.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimit {
    pub records: usize,
    /// What its records cost ([`BatchLimit::cost`]).
    pub bytes: usize,
}

/// What a record costs beside its key and value.
const RECORD_SIZE: usize = std::mem::size_of::<crate::record::Record>();

impl BatchLimit {
    /// What a record with a key of `key` bytes and a value of `value` bytes costs against
    /// [`BatchLimit::bytes`]: both, and the `Record`; a value lent rather than copied
    /// ([`LEND_FROM`]) twice, for what its kept message holds besides it (librdkafka's op, and the
    /// rest of the buffer it points into until that is read too: counted once, lent 1 KiB values
    /// raised the peak RSS by 7 MiB, counted twice not at all).
    pub fn cost(key: usize, value: usize) -> usize {
        let lent = if value >= LEND_FROM { value } else { 0 };
        key + value + lent + RECORD_SIZE
    }

    /// How many records the next read may take, with `count` records of `bytes` in the batch: the
    /// rest of the record bound, and of the byte bound at the sizes seen so far (256 while there
    /// is no size to go by, so a batch overshoots the byte bound by one read at most).
    pub fn read_size(&self, count: usize, bytes: usize) -> usize {
        let rest = self.records - count;
        let fit = match count {
            0 => 256,
            _ => (self.bytes.saturating_sub(bytes) / (bytes / count).max(1)).max(1),
        };
        rest.min(fit)
    }
}
