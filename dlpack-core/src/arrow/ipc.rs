//! Arrow IPC files, mapped: record batches decoded over the mapping, zero-copy where
//! each buffer is aligned for its type.

use std::fs::File;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::convert::try_fb_to_schema;
use arrow_ipc::reader::{FileDecoder, read_footer_length};
use arrow_ipc::{Block, root_as_footer};
use arrow_schema::ArrowError;

use crate::batch::TensorBatch;
use crate::error::{ArrowErrorKind, Error, Result};

fn file_error(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Arrow {
        column: String::new(),
        kind: ArrowErrorKind::File,
        reason: format!("invalid Arrow IPC file {}: {reason}", path.display()),
    }
}

fn io_error(path: &Path, err: &std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        kind: err.kind(),
        message: err.to_string(),
    }
}

/// Opens `path` for reading without blocking (a FIFO in a file's place is refused, not
/// waited for) and checks it is a regular file.
fn open(path: &Path) -> Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| io_error(path, &e))?;
    let metadata = file.metadata().map_err(|e| io_error(path, &e))?;
    if !metadata.is_file() {
        return Err(Error::Io {
            path: path.to_owned(),
            kind: std::io::ErrorKind::InvalidInput,
            message: "not a regular file".to_owned(),
        });
    }
    Ok(file)
}

/// The smallest IPC file: the magic, its padding, a footer length and the magic again.
const MIN_LEN: usize = 6 + 2 + 4 + 6;

/// Reads every record batch of the Arrow IPC file (the "Feather v2" format) at `path`,
/// over a read-only mapping of the file: a buffer aligned for its type is the mapping
/// itself (no copy: the batches keep the mapping alive), one that is not (IPC writers
/// may leave buffers byte-aligned) is copied by arrow-rs into aligned memory.
/// Compressed files are refused (this crate builds arrow-ipc without its codecs; a
/// program that turns arrow-ipc's `lz4` or `zstd` feature on decodes them, trusting the
/// uncompressed length each buffer claims, as arrow-ipc does).
///
/// The file is foreign input: a truncated file, offsets outside it and a malformed
/// footer, schema or batch are an [`Error::Arrow`] of kind
/// [`File`](ArrowErrorKind::File), never a panic. As with every mapping, the file must
/// not be truncated or written while the batches live.
pub fn read_ipc_file(path: impl AsRef<Path>) -> Result<Vec<RecordBatch>> {
    let path = path.as_ref();
    let file = open(path)?;
    let len = usize::try_from(file.metadata().map_err(|e| io_error(path, &e))?.len())
        .map_err(|_| file_error(path, "larger than the address space"))?;
    if len < MIN_LEN {
        return Err(file_error(
            path,
            format!("{len} bytes: too short for an IPC file"),
        ));
    }
    // SAFETY:
    // - a read-only mapping of a regular file opened for reading; the mapping is valid
    //   for `len` bytes while the `Mmap` lives, which the buffer's allocation keeps;
    // - the crate's documented rule for mappings (here and `map_safetensors`): the file
    //   is not truncated or written while mapped.
    let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_error(path, &e))?;
    let pointer =
        NonNull::new(mmap.as_ptr().cast_mut()).ok_or_else(|| file_error(path, "mapped at NULL"))?;
    let len = mmap.len();
    // SAFETY: `len` readable bytes at `pointer` (the mapping), kept alive and unmoved by
    // the allocation (the `Mmap`), and never written (the mapping is read-only, and the
    // file is not written while mapped: see above).
    let buffer = unsafe { Buffer::from_custom_allocation(pointer, len, Arc::new(mmap)) };
    // arrow-ipc's decoders check what they read, but index some offsets directly: a
    // panic on a file that lies is caught here and reported as the file's error.
    match catch_unwind(AssertUnwindSafe(|| decode(&buffer))) {
        Ok(result) => result.map_err(|e| file_error(path, e)),
        Err(_) => Err(file_error(path, "malformed (its decoder failed on it)")),
    }
}

/// The batches of a file mapped as `buffer`.
fn decode(buffer: &Buffer) -> Result<Vec<RecordBatch>, ArrowError> {
    let len = buffer.len();
    let trailer: [u8; 10] = buffer[len - 10..]
        .try_into()
        .map_err(|_| ArrowError::IpcError("no trailer".to_owned()))?;
    let footer_len = read_footer_length(trailer)?;
    let footer_start = (len - 10)
        .checked_sub(footer_len)
        .ok_or_else(|| ArrowError::IpcError(format!("a footer of {footer_len} bytes")))?;
    let footer = root_as_footer(&buffer[footer_start..len - 10])
        .map_err(|e| ArrowError::IpcError(format!("its footer: {e}")))?;
    let schema = footer
        .schema()
        .ok_or_else(|| ArrowError::IpcError("no schema".to_owned()))?;
    let schema = Arc::new(try_fb_to_schema(schema)?);
    let mut decoder = FileDecoder::new(schema, footer.version());
    let block_data = |block: &Block| -> Result<Buffer, ArrowError> {
        let start = usize::try_from(block.offset()).ok();
        let meta = usize::try_from(block.metaDataLength()).ok();
        let body = usize::try_from(block.bodyLength()).ok();
        let range = start.zip(meta).zip(body).and_then(|((start, meta), body)| {
            let end = start.checked_add(meta)?.checked_add(body)?;
            (end <= footer_start).then_some((start, end - start))
        });
        let (start, length) = range.ok_or_else(|| {
            ArrowError::IpcError(format!(
                "a block at {} of {} + {} bytes, outside the file",
                block.offset(),
                block.metaDataLength(),
                block.bodyLength()
            ))
        })?;
        Ok(buffer.slice_with_length(start, length))
    };
    for block in footer.dictionaries().iter().flatten() {
        decoder.read_dictionary(block, &block_data(block)?)?;
    }
    let mut batches = Vec::new();
    for block in footer.recordBatches().iter().flatten() {
        if let Some(batch) = decoder.read_record_batch(block, &block_data(block)?)? {
            batches.push(batch);
        }
    }
    Ok(batches)
}

impl TensorBatch {
    /// Reads an Arrow IPC file of one record batch as a batch of tensors, one per
    /// column, named by the column, over the file's mapping (see [`read_ipc_file`]):
    /// zero-copy where aligned. A file of several batches is an [`Error::Arrow`] of
    /// kind [`Chunks`](ArrowErrorKind::Chunks): read them with [`read_ipc_file`] and
    /// convert each; a file of none gives an empty batch.
    pub fn read_arrow_ipc(path: impl AsRef<Path>) -> Result<TensorBatch> {
        let path = path.as_ref();
        let mut batches = read_ipc_file(path)?;
        match batches.len() {
            1 => super::record_batch_to_tensors(&batches.remove(0)),
            0 => Ok(TensorBatch::new()),
            n => Err(Error::Arrow {
                column: String::new(),
                kind: ArrowErrorKind::Chunks,
                reason: format!(
                    "{} holds {n} record batches: a batch of tensors is one; read them with \
                     `dlpack_core::arrow::read_ipc_file` and convert each",
                    path.display()
                ),
            }),
        }
    }
}
