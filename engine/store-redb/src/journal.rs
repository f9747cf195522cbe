//! The journal: where a group commit becomes durable with one sequential
//! write and one sync, instead of redb's durable commit.
//!
//! Why: a durable redb commit writes every B-tree page the group dirtied,
//! wherever its allocator put them, and syncs them; on this kind of disk
//! that is ≈ 0.3 ms for a single session's commit, and a turn takes four
//! commits one after another. Appending the group's encoded writes to a
//! preallocated file (one or a few adjacent blocks, no file metadata to
//! update) takes a third of that on Linux, where the journal is written
//! with `O_DIRECT | O_DSYNC` (one write that returns when the blocks are
//! on the device, instead of a write into the page cache and an
//! `fdatasync` to push it out: ≈ 0.11 against ≈ 0.17 ms here), and about
//! half elsewhere or where the file system refuses direct I/O. redb then commits the
//! same group without syncing ([`Durability::None`](::redb::Durability)):
//! readers see it at once, and the disk catches up at the next
//! *checkpoint*, a durable redb commit made every [`CHECKPOINT_GROUPS`]
//! groups or when the journal is full.
//!
//! # Crash recovery
//!
//! Every journaled transaction also stores its record's sequence number in
//! redb's `meta` table (`journal_seq`), so whatever state redb opens with
//! after a crash, it says which records it already holds. Opening the store
//! reads the journal from the start and applies, in one durable
//! transaction, the records that follow that number. Records are written
//! front to back and the file is reused from the start after each
//! checkpoint, so reading stops at the first record that is not the next
//! one: a torn tail (a group whose sync never returned, so nobody was told
//! it committed) fails its checksum; records of an older round carry older
//! numbers; records of another store (a journal left beside a database
//! file that was deleted or replaced by a new one) carry another id.
//!
//! # Record layout
//!
//! | bytes | field |
//! | --- | --- |
//! | 4 | [`MAGIC`] |
//! | 4 | payload length, little-endian |
//! | 8 | sequence number, little-endian (the first is 1) |
//! | 8 | the store's id (`meta`'s `store_id`), little-endian |
//! | 4 | CRC-32 of the sequence number, the length, the id and the payload |
//! | 4 | zero (reserved) |
//! | payload length | the writes: a count (4 bytes), then each [`Write`] |
//! | to the next multiple of [`BLOCK`] | zeros |
//!
//! Records start on block boundaries so direct I/O can write them.
//!
//! A write is a tag byte, then its fields: strings and byte strings as a
//! 4-byte length and the bytes, flags and table names as one byte, inbox
//! numbers as 8 bytes, an optional byte string as a flag byte (0 absent,
//! 1 present) and then the string.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{NamedTable, Write};
use subs_store::StoreError;

/// The journal file's size, written with zeros when it is created so that
/// appending never changes the file's size or allocation (a sync then
/// writes only data). A group whose record does not fit in what is left
/// is committed to redb durably instead (a checkpoint).
pub const JOURNAL_BYTES: u64 = 8 * 1024 * 1024;

/// Groups journaled between two checkpoints at most. redb frees the pages
/// a transaction replaces only at a durable commit, so the file grows by
/// what the groups since the last checkpoint dirtied; this bounds it.
pub const CHECKPOINT_GROUPS: u32 = 64;

/// Marks the start of a record.
pub const MAGIC: u32 = 0x4a42_5553; // "SUBJ" little-endian

const HEADER: usize = 32;

/// Records start and end on multiples of this: the alignment direct I/O
/// asks of offsets, lengths and memory on every common device.
pub const BLOCK: usize = 4096;

/// How records reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `O_DIRECT | O_DSYNC` (Linux): each write returns once it is on the
    /// device.
    Direct,
    /// A write into the page cache, then `fdatasync`.
    Buffered,
}

/// The journal of one store, owned by its writer thread.
pub struct Journal {
    file: File,
    mode: Mode,
    path: PathBuf,
    /// The id of the store this journal belongs to, in every record.
    store: u64,
    /// Where the next record goes.
    head: u64,
    /// The number of the next record.
    next_seq: u64,
    /// Records written since the last checkpoint.
    groups: u32,
    /// The next record, encoded; kept to reuse its allocation.
    buf: Vec<u8>,
    /// Where a record is copied to be written with direct I/O: a slice of
    /// it starts on a [`BLOCK`] boundary.
    aligned: Vec<u8>,
}

/// A record that [`Journal::append`] wrote, to take back with
/// [`Journal::revoke`] if redb then fails to commit the same group.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    start: u64,
    pub seq: u64,
}

/// Records the store does not hold yet: (sequence number, writes), in
/// order.
pub type Found = Vec<(u64, Vec<Write>)>;

impl Journal {
    /// The journal of the store at `store`: the same path with `-journal`
    /// appended.
    pub fn path_for(store: &Path) -> PathBuf {
        let mut path = store.as_os_str().to_owned();
        path.push("-journal");
        PathBuf::from(path)
    }

    /// Opens the journal at `path`, creating it (full of zeros) if it does
    /// not exist, and returns the records after `applied`, the last record
    /// the store holds. Must be called while holding the store's lock (redb
    /// locks its file), so no other process writes the journal.
    pub fn open(path: PathBuf, store: u64, applied: u64) -> Result<(Journal, Found), StoreError> {
        Self::open_with(path, store, applied, Mode::Direct)
    }

    /// [`open`](Self::open), asking for `mode`; direct I/O falls back to
    /// buffered writes where it is not available.
    pub fn open_with(path: PathBuf, store: u64, applied: u64, mode: Mode) -> Result<(Journal, Found), StoreError> {
        let io = |what: &str, err: io::Error| StoreError::io(format!("{what} {}", path.display()), err);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|err| io("cannot open the store's journal", err))?;
        let size = file.metadata().map_err(|err| io("cannot read the store's journal", err))?.len();
        let records = scan(&mut file, size, store, applied, &path)?;
        if size < JOURNAL_BYTES {
            // New (or cut short): fill it, so appends only overwrite. In
            // pieces: one 8 MiB buffer would stay in the allocator's heap.
            let zeros = [0; 64 * 1024];
            file.seek(SeekFrom::End(0)).map_err(|err| io("cannot extend the store's journal", err))?;
            let mut at = size;
            while at < JOURNAL_BYTES {
                let left = usize::try_from(JOURNAL_BYTES - at).unwrap_or(usize::MAX);
                let piece = &zeros[..left.min(zeros.len())];
                file.write_all(piece).map_err(|err| io("cannot extend the store's journal", err))?;
                at += piece.len() as u64;
            }
            file.sync_all().map_err(|err| io("cannot sync the store's journal", err))?;
            sync_parent(&path).map_err(|err| io("cannot sync the directory of the store's journal", err))?;
        }
        let (file, mode) = match mode {
            Mode::Direct => match open_direct(&path) {
                Ok(direct) => (direct, Mode::Direct),
                Err(err) => {
                    tracing::debug!(path = %path.display(), %err, "the store's journal is written without direct I/O");
                    (file, Mode::Buffered)
                }
            },
            Mode::Buffered => (file, Mode::Buffered),
        };
        let last = records.last().map_or(applied, |(seq, _)| *seq);
        let journal = Journal {
            file,
            mode,
            path,
            store,
            head: 0,
            next_seq: last + 1,
            groups: 0,
            buf: Vec::new(),
            aligned: Vec::new(),
        };
        Ok((journal, records))
    }

    /// Encodes `batches` as the next record. Returns whether it should go
    /// to redb durably instead (a checkpoint): the journal has taken
    /// [`CHECKPOINT_GROUPS`] groups since the last one (then nothing is
    /// encoded), or the record does not fit in what is left.
    pub fn prepare<'a>(&mut self, batches: impl Iterator<Item = &'a [Write]> + Clone) -> bool {
        self.buf.clear();
        if self.buf.capacity() > 1024 * 1024 {
            // One huge group should not pin its buffer for ever.
            self.buf.shrink_to(64 * 1024);
        }
        if self.groups >= CHECKPOINT_GROUPS {
            return true;
        }
        // A config the store already held changed nothing: replaying the
        // record finds the slot as the group found it, so it is left out.
        let kept = |write: &&Write| !matches!(write, Write::SessionAgent { unchanged, .. } if unchanged.load(Ordering::Relaxed));
        let count = batches.clone().flatten().filter(kept).count();
        self.buf.extend_from_slice(&[0; HEADER]);
        put_u32(&mut self.buf, count);
        for write in batches.flatten().filter(kept) {
            encode(&mut self.buf, write);
        }
        self.head + padded(self.buf.len()) as u64 > JOURNAL_BYTES
    }

    /// How this journal writes.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The number the prepared record gets when appended.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The last record appended (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Writes the prepared record at the head and syncs it. On error the
    /// record may be partly or wholly on disk: [`revoke`](Self::revoke) it.
    pub fn append(&mut self) -> Result<Appended, (Appended, io::Error)> {
        let appended = Appended { start: self.head, seq: self.next_seq };
        let (header, payload) = self.buf.split_at_mut(HEADER);
        Header::new(appended.seq, self.store, payload).write(header);
        self.buf.resize(padded(self.buf.len()), 0);
        let mut written = self.write_at(appended.start);
        if self.mode == Mode::Direct && written.as_ref().is_err_and(|err| err.kind() == io::ErrorKind::InvalidInput) {
            // The file system took the flags at open but refuses the
            // write: nothing was written; go on without direct I/O.
            tracing::debug!(path = %self.path.display(), "the store's journal is written without direct I/O");
            written = self.buffered().and_then(|()| self.write_at(appended.start));
        }
        match written {
            Ok(()) => {
                self.head += self.buf.len() as u64;
                self.next_seq += 1;
                self.groups += 1;
                Ok(appended)
            }
            Err(err) => Err((appended, err)),
        }
    }

    /// Takes back a record whose group redb did not commit: its first
    /// block is zeroed and synced, so recovery stops before it, and the next record
    /// takes its place and number.
    pub fn revoke(&mut self, appended: Appended) -> io::Result<()> {
        self.buf.clear();
        self.buf.resize(BLOCK, 0);
        self.write_at(appended.start)?;
        self.head = appended.start;
        self.next_seq = appended.seq;
        Ok(())
    }

    /// Writes `buf` (a multiple of [`BLOCK`] long) at `offset` and returns
    /// once it is on the device.
    fn write_at(&mut self, offset: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(offset))?;
        match self.mode {
            Mode::Direct => {
                self.aligned.resize(self.buf.len() + BLOCK, 0);
                let skip = self.aligned.as_ptr().align_offset(BLOCK).min(BLOCK);
                let block = &mut self.aligned[skip..skip + self.buf.len()];
                block.copy_from_slice(&self.buf);
                let written = self.file.write_all(block);
                if self.aligned.capacity() > 1024 * 1024 {
                    // One huge group should not pin its copy for ever.
                    self.aligned = Vec::new();
                }
                written
            }
            Mode::Buffered => {
                self.file.write_all(&self.buf)?;
                self.file.sync_data()
            }
        }
    }

    /// Switches to buffered writes, reopening the file without direct I/O.
    fn buffered(&mut self) -> io::Result<()> {
        self.file = OpenOptions::new().write(true).open(&self.path)?;
        self.mode = Mode::Buffered;
        Ok(())
    }

    /// redb has committed durably everything up to the last record: the
    /// journal starts over from its beginning.
    pub fn checkpointed(&mut self) {
        self.head = 0;
        self.groups = 0;
    }

    /// Whether records were appended since the last checkpoint.
    pub fn pending(&self) -> bool {
        self.groups > 0
    }

    /// The file, for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A record's header; the layout is in the module docs.
struct Header {
    len: u32,
    seq: u64,
    store: u64,
    crc: u32,
}

impl Header {
    /// The header of record `seq` of `store` holding `payload`.
    fn new(seq: u64, store: u64, payload: &[u8]) -> Header {
        // A record is bounded well below 4 GiB by the journal's size.
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let mut header = Header { len, seq, store, crc: 0 };
        header.crc = header.checksum(payload);
        header
    }

    /// The CRC-32 of the header's fields and `payload`.
    fn checksum(&self, payload: &[u8]) -> u32 {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.seq.to_le_bytes());
        crc.update(&self.len.to_le_bytes());
        crc.update(&self.store.to_le_bytes());
        crc.update(payload);
        crc.finalize()
    }

    fn write(&self, into: &mut [u8]) {
        into[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        into[4..8].copy_from_slice(&self.len.to_le_bytes());
        into[8..16].copy_from_slice(&self.seq.to_le_bytes());
        into[16..24].copy_from_slice(&self.store.to_le_bytes());
        into[24..28].copy_from_slice(&self.crc.to_le_bytes());
        into[28..32].fill(0);
    }

    /// The header in `bytes`, or `None` where no record starts.
    fn read(bytes: &[u8; HEADER]) -> Option<Header> {
        let u32_at = |at: usize| bytes[at..at + 4].try_into().map(u32::from_le_bytes).ok();
        let u64_at = |at: usize| bytes[at..at + 8].try_into().map(u64::from_le_bytes).ok();
        if u32_at(0)? != MAGIC {
            return None;
        }
        Some(Header { len: u32_at(4)?, seq: u64_at(8)?, store: u64_at(16)?, crc: u32_at(24)? })
    }
}

/// `len` rounded up to a whole number of blocks.
fn padded(len: usize) -> usize {
    len.div_ceil(BLOCK) * BLOCK
}

/// A write handle on the journal whose writes bypass the page cache and
/// return once on the device.
#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().write(true).custom_flags(libc::O_DIRECT | libc::O_DSYNC).open(path)
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> io::Result<File> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "direct I/O is used on Linux only"))
}

/// Makes the journal's directory entry durable once it is created.
fn sync_parent(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    if let Some(parent) = path.parent() {
        let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        File::open(parent)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// The records of `store` in the journal `file` (`size` bytes) after
/// `applied`, reading from the start and stopping at the first that is not
/// the next record. Reads record by record: usually only the first block.
fn scan(file: &mut File, size: u64, store: u64, applied: u64, path: &Path) -> Result<Found, StoreError> {
    let unreadable =
        |err: io::Error| StoreError::io(format!("cannot read the store's journal {}", path.display()), err);
    let mut records = Vec::new();
    let mut at = 0u64;
    let mut previous: Option<u64> = None;
    let mut payload = Vec::new();
    while at + HEADER as u64 <= size {
        let mut bytes = [0; HEADER];
        file.seek(SeekFrom::Start(at)).and_then(|_| file.read_exact(&mut bytes)).map_err(unreadable)?;
        // Checked before the payload is read, so garbage never sizes an
        // allocation.
        let Some(header) = Header::read(&bytes) else { break };
        let len = header.len;
        if header.store != store || at + HEADER as u64 + u64::from(len) > size {
            break;
        }
        payload.resize(len as usize, 0);
        file.read_exact(&mut payload).map_err(unreadable)?;
        let seq = header.seq;
        let next = previous.is_none_or(|previous| seq == previous + 1);
        if header.checksum(&payload) != header.crc || !next {
            break;
        }
        previous = Some(seq);
        if seq > applied {
            if records.is_empty() && seq != applied + 1 {
                return Err(StoreError::Corrupt {
                    table: "journal",
                    message: format!(
                        "{} resumes at record {seq} but the store holds records up to {applied}: the records between are missing",
                        path.display()
                    ),
                });
            }
            let writes = decode(&payload).map_err(|message| StoreError::Corrupt {
                table: "journal",
                message: format!("record {seq} of {}: {message}", path.display()),
            })?;
            records.push((seq, writes));
        }
        at += padded(HEADER + len as usize) as u64;
    }
    Ok(records)
}

fn put_u32(buf: &mut Vec<u8>, n: usize) {
    // Lengths are bounded well below 4 GiB by the size of a commit.
    buf.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(buf, bytes.len());
    buf.extend_from_slice(bytes);
}

const SESSION: u8 = 1;
const LOG: u8 = 2;
const PUT_NAMED: u8 = 3;
const DELETE_NAMED: u8 = 4;
const PUSH_INBOX: u8 = 5;
const DELETE_INBOX: u8 = 6;
const COUNT_DECISIONS: u8 = 7;
const FORGET_DECISIONS: u8 = 8;
const SESSION_AGENT: u8 = 9;

fn table_tag(table: NamedTable) -> u8 {
    match table {
        NamedTable::Turns => 1,
        NamedTable::Agents => 2,
        NamedTable::Keys => 3,
        NamedTable::Tenants => 4,
        NamedTable::McpServers => 5,
    }
}

fn encode(buf: &mut Vec<u8>, write: &Write) {
    match write {
        Write::Session { key, active, value } => {
            buf.push(SESSION);
            put_bytes(buf, key.as_bytes());
            buf.push(u8::from(*active));
            put_bytes(buf, value);
        }
        Write::SessionAgent { key, value, .. } => {
            buf.push(SESSION_AGENT);
            put_bytes(buf, key.as_bytes());
            match value {
                Some(value) => {
                    buf.push(1);
                    put_bytes(buf, value);
                }
                None => buf.push(0),
            }
        }
        Write::Log { key, value } => {
            buf.push(LOG);
            put_bytes(buf, key.as_bytes());
            put_bytes(buf, value);
        }
        Write::PutNamed { table, key, id, value } => {
            buf.push(PUT_NAMED);
            buf.push(table_tag(*table));
            put_bytes(buf, key.as_bytes());
            put_bytes(buf, id.as_bytes());
            put_bytes(buf, value);
        }
        Write::DeleteNamed { table, key, id } => {
            buf.push(DELETE_NAMED);
            buf.push(table_tag(*table));
            put_bytes(buf, key.as_bytes());
            put_bytes(buf, id.as_bytes());
        }
        Write::PushInbox { key, value } => {
            buf.push(PUSH_INBOX);
            put_bytes(buf, key.as_bytes());
            put_bytes(buf, value);
        }
        Write::DeleteInbox { key, seq } => {
            buf.push(DELETE_INBOX);
            put_bytes(buf, key.as_bytes());
            buf.extend_from_slice(&seq.to_le_bytes());
        }
        Write::CountDecisions { tenant, agent, version, decisions } => {
            buf.push(COUNT_DECISIONS);
            put_bytes(buf, tenant.as_bytes());
            put_bytes(buf, agent.as_bytes());
            put_bytes(buf, version.as_bytes());
            buf.extend_from_slice(&decisions.to_le_bytes());
        }
        Write::ForgetDecisions { tenant, agent } => {
            buf.push(FORGET_DECISIONS);
            put_bytes(buf, tenant.as_bytes());
            put_bytes(buf, agent.as_bytes());
        }
    }
}

/// Reads a payload back; the error names what is wrong and where.
fn decode(payload: &[u8]) -> Result<Vec<Write>, String> {
    let mut reader = Reader { bytes: payload, at: 0 };
    let count = reader.u32()?;
    let mut writes = Vec::with_capacity(count.min(4096) as usize);
    for index in 0..count {
        let at = reader.at;
        let write = reader.write().map_err(|err| format!("write {index} (byte {at}): {err}"))?;
        writes.push(write);
    }
    if reader.at != payload.len() {
        return Err(format!("{} bytes follow the last write", payload.len() - reader.at));
    }
    Ok(writes)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let taken = self.at.checked_add(n).and_then(|end| self.bytes.get(self.at..end)).ok_or("it is cut short")?;
        self.at += n;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "it is cut short")?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "it is cut short")?))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }

    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "a key is not UTF-8".to_owned())
    }

    fn table(&mut self) -> Result<NamedTable, String> {
        match self.u8()? {
            1 => Ok(NamedTable::Turns),
            2 => Ok(NamedTable::Agents),
            3 => Ok(NamedTable::Keys),
            4 => Ok(NamedTable::Tenants),
            5 => Ok(NamedTable::McpServers),
            other => Err(format!("unknown table {other}")),
        }
    }

    fn write(&mut self) -> Result<Write, String> {
        Ok(match self.u8()? {
            SESSION => {
                let key = self.string()?;
                let active = match self.u8()? {
                    0 => false,
                    1 => true,
                    other => return Err(format!("the active flag is {other}")),
                };
                Write::Session { key, active, value: self.bytes()? }
            }
            SESSION_AGENT => {
                let key = self.string()?;
                let value = match self.u8()? {
                    0 => None,
                    1 => Some(self.bytes()?),
                    other => return Err(format!("the config flag is {other}")),
                };
                Write::SessionAgent { key, value, unchanged: AtomicBool::new(false) }
            }
            LOG => Write::Log { key: self.string()?, value: self.bytes()? },
            PUT_NAMED => {
                let table = self.table()?;
                Write::PutNamed { table, key: self.string()?, id: self.string()?, value: self.bytes()? }
            }
            DELETE_NAMED => {
                let table = self.table()?;
                Write::DeleteNamed { table, key: self.string()?, id: self.string()? }
            }
            PUSH_INBOX => Write::PushInbox { key: self.string()?, value: self.bytes()? },
            DELETE_INBOX => Write::DeleteInbox { key: self.string()?, seq: self.u64()? },
            COUNT_DECISIONS => Write::CountDecisions {
                tenant: self.string()?,
                agent: self.string()?,
                version: self.string()?,
                decisions: self.u64()?,
            },
            FORGET_DECISIONS => Write::ForgetDecisions { tenant: self.string()?, agent: self.string()? },
            other => return Err(format!("unknown write kind {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Write> {
        vec![
            Write::Session { key: "t/s".into(), active: true, value: b"{\"a\":1}".to_vec() },
            Write::Session { key: "t/s".into(), active: false, value: Vec::new() },
            Write::SessionAgent {
                key: "t/s".into(),
                value: Some(b"{\"b\":2}".to_vec()),
                unchanged: AtomicBool::new(false),
            },
            Write::SessionAgent { key: "t/s".into(), value: None, unchanged: AtomicBool::new(false) },
            Write::Log { key: "t/s".into(), value: vec![0, 1, 2, 255] },
            Write::PutNamed { table: NamedTable::Turns, key: "t/s".into(), id: "turn-1".into(), value: b"x".to_vec() },
            Write::PutNamed { table: NamedTable::Agents, key: "t".into(), id: "a".into(), value: b"y".to_vec() },
            Write::DeleteNamed { table: NamedTable::Keys, key: "t".into(), id: "k".into() },
            Write::PutNamed { table: NamedTable::Tenants, key: "t".into(), id: String::new(), value: b"z".to_vec() },
            Write::PushInbox { key: "t/s".into(), value: b"item".to_vec() },
            Write::DeleteInbox { key: "t/s".into(), seq: u64::MAX - 1 },
            Write::CountDecisions { tenant: "t".into(), agent: "a".into(), version: "sha256:1".into(), decisions: 3 },
            Write::ForgetDecisions { tenant: "t".into(), agent: "a".into() },
        ]
    }

    fn encoded(writes: &[Write]) -> Vec<u8> {
        let mut buf = Vec::new();
        put_u32(&mut buf, writes.len());
        for write in writes {
            encode(&mut buf, write);
        }
        buf
    }

    #[test]
    fn every_kind_of_write_reads_back_as_written() {
        let writes = all_kinds();
        let back = decode(&encoded(&writes)).unwrap();
        assert_eq!(format!("{back:?}"), format!("{writes:?}"));
    }

    #[test]
    fn a_damaged_payload_is_an_error_that_says_where() {
        let bytes = encoded(&all_kinds());
        let cut = decode(&bytes[..bytes.len() - 3]).unwrap_err();
        let last = format!("write {}", all_kinds().len() - 1);
        assert!(cut.contains(&last) && cut.contains("cut short"), "{cut}");
        let mut unknown = bytes.clone();
        unknown[4] = 99;
        assert!(decode(&unknown).unwrap_err().contains("unknown write kind 99"));
        let mut extra = bytes;
        extra.push(0);
        assert!(decode(&extra).unwrap_err().contains("1 bytes follow"));
    }

    const STORE: u64 = 0x5eed;

    /// Both ways of writing, on a file of their own each.
    const MODES: [Mode; 2] = [Mode::Direct, Mode::Buffered];

    fn journal(dir: &tempfile::TempDir, applied: u64) -> (Journal, Vec<u64>) {
        journal_with(dir, applied, Mode::Direct)
    }

    fn journal_with(dir: &tempfile::TempDir, applied: u64, mode: Mode) -> (Journal, Vec<u64>) {
        let (journal, found) = Journal::open_with(dir.path().join("j"), STORE, applied, mode).unwrap();
        (journal, found.iter().map(|(seq, _)| *seq).collect())
    }

    fn append(journal: &mut Journal, n: usize) -> Appended {
        let writes: Vec<Write> = (0..n).map(|i| Write::Log { key: format!("s{i}"), value: vec![7; i] }).collect();
        assert!(!journal.prepare(std::iter::once(writes.as_slice())));
        journal.append().unwrap()
    }

    #[test]
    fn records_after_the_applied_one_are_found_in_order() {
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            let (mut j, found) = journal_with(&dir, 0, mode);
            if j.mode() != mode {
                // tmpfs before Linux 6.6, for one, has no direct I/O.
                eprintln!("direct I/O is not available in {}: the buffered path is tested twice", dir.path().display());
            }
            assert!(found.is_empty());
            assert_eq!(std::fs::metadata(dir.path().join("j")).unwrap().len(), JOURNAL_BYTES);
            for n in 1..=5 {
                let appended = append(&mut j, n * 100);
                assert_eq!(appended.seq, n as u64);
                assert_eq!(appended.start % BLOCK as u64, 0, "{mode:?}: records start on a block");
            }
            drop(j);
            assert_eq!(journal_with(&dir, 0, mode).1, vec![1, 2, 3, 4, 5], "{mode:?}");
            assert_eq!(journal(&dir, 3).1, vec![4, 5], "{mode:?}");
            let (j, found) = journal(&dir, 5);
            assert!(found.is_empty());
            assert_eq!(j.next_seq(), 6);
            let (_, found) = Journal::open(dir.path().join("j"), STORE, 4).unwrap();
            let expected: Vec<Write> =
                (0..500).map(|i| Write::Log { key: format!("s{i}"), value: vec![7; i] }).collect();
            assert_eq!(format!("{:?}", found[0].1), format!("{expected:?}"), "{mode:?}: the writes read back");
        }
    }

    #[test]
    fn a_torn_or_revoked_tail_ends_the_journal() {
        for mode in MODES {
            torn_or_revoked(mode);
        }
    }

    fn torn_or_revoked(mode: Mode) {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal_with(&dir, 0, mode);
        append(&mut j, 1);
        append(&mut j, 2);
        let third = append(&mut j, 3);
        // Taken back: the next record takes its place and number.
        j.revoke(third).unwrap();
        assert_eq!(journal(&dir, 0).1, vec![1, 2]);
        let again = append(&mut j, 4);
        assert_eq!((again.seq, again.start), (3, third.start));
        assert_eq!(journal(&dir, 0).1, vec![1, 2, 3]);
        // A torn write: the last record's payload is not what its
        // checksum says.
        let mut contents = std::fs::read(dir.path().join("j")).unwrap();
        contents[again.start as usize + HEADER + 2] ^= 0xff;
        std::fs::write(dir.path().join("j"), &contents).unwrap();
        let (j, found) = journal(&dir, 0);
        assert_eq!(found, vec![1, 2]);
        assert_eq!(j.next_seq(), 3);
    }

    #[test]
    fn after_a_checkpoint_older_records_are_not_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(&dir, 0);
        for n in 1..=4 {
            append(&mut j, n * 10);
        }
        // redb now holds records 1-4 durably; the next round overwrites
        // the start of the file with a shorter record.
        j.checkpointed();
        assert_eq!(append(&mut j, 1).seq, 5);
        drop(j);
        // A store that holds 4 finds 5 only; one that holds 5, nothing,
        // though records 2-4 are still in the file behind it.
        assert_eq!(journal(&dir, 4).1, vec![5]);
        assert!(journal(&dir, 5).1.is_empty());
        // Records missing between the store and the journal: an error,
        // not a silent gap.
        let err = Journal::open(dir.path().join("j"), STORE, 2).err().unwrap();
        assert!(err.to_string().contains("resumes at record 5 but the store holds records up to 2"), "{err}");
    }

    #[test]
    fn another_stores_records_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(&dir, 0);
        append(&mut j, 1);
        append(&mut j, 2);
        drop(j);
        // A new database file beside an old journal: its id differs.
        let (j, found) = Journal::open(dir.path().join("j"), STORE + 1, 0).unwrap();
        assert!(found.is_empty());
        assert_eq!(j.next_seq(), 1);
    }

    #[test]
    fn a_full_journal_asks_for_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(&dir, 0);
        let big = vec![Write::Log { key: "s".into(), value: vec![1; JOURNAL_BYTES as usize / 3] }];
        assert!(!j.prepare(std::iter::once(big.as_slice())));
        j.append().unwrap();
        assert!(!j.prepare(std::iter::once(big.as_slice())));
        j.append().unwrap();
        assert!(j.prepare(std::iter::once(big.as_slice())), "a third would not fit");
        j.checkpointed();
        assert!(!j.prepare(std::iter::once(big.as_slice())));
        for _ in 0..CHECKPOINT_GROUPS {
            append(&mut j, 1);
        }
        assert!(j.prepare(std::iter::once(big.as_slice())), "{CHECKPOINT_GROUPS} groups since the last one");
    }
}
