//! Arrow's PyCapsule interface (features `pyo3` and `arrow`): a column or a table from any
//! producer of `__arrow_c_array__` or `__arrow_c_stream__` (pyarrow, Polars, Hugging
//! Face `datasets`, DuckDB, arro3, pandas), into a tensor or a batch, without a copy.
//!
//! The C structs a producer hands over are foreign input: before arrow-rs reads them
//! (its importer trusts them, and asserts where they lie), every field this crate's
//! columns use is checked here against the type the schema declares (lengths, offsets,
//! buffer and child counts, null pointers, the child lengths a fixed-size list needs),
//! and any other type is refused before its array is read. Like every consumer of the
//! interface, the import then trusts the protocol: each buffer holds what its type and
//! length say, until the producer's release callback runs (exactly once, when the last
//! tensor over the column is dropped, or at once on refusal).

use core::ffi::{CStr, c_char, c_void};
use core::ptr::NonNull;
use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, make_array};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};

use crate::arrow::{column_to_tensor, is_numeric, record_batch_to_tensors, type_reason};
use crate::batch::TensorBatch;
use crate::tensor::ManagedTensor;

use super::super::error::type_name;

/// Name of a capsule holding an `ArrowSchema`.
const SCHEMA: &CStr = c"arrow_schema";
/// Name of a capsule holding an `ArrowArray`.
const ARRAY: &CStr = c"arrow_array";
/// Name of a capsule holding an `ArrowArrayStream`.
const STREAM: &CStr = c"arrow_array_stream";

/// Deepest nesting read (a fixed-size list of fixed-size lists of ...): deeper input is
/// refused rather than recursed into.
const MAX_DEPTH: usize = 64;

/// What the producer's type offers, looked up on the type (as Python looks up special
/// methods), so that an instance attribute cannot answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Offer {
    Array,
    Stream,
}

fn offer(obj: &Bound<'_, PyAny>) -> PyResult<Option<Offer>> {
    let py = obj.py();
    let ty = obj.get_type();
    if ty.hasattr(intern!(py, "__arrow_c_array__"))? {
        Ok(Some(Offer::Array))
    } else if ty.hasattr(intern!(py, "__arrow_c_stream__"))? {
        Ok(Some(Offer::Stream))
    } else {
        Ok(None)
    }
}

/// One column of an Arrow producer as a tensor: `None` when the object speaks no Arrow.
/// A table (a struct column: a record batch, a table, a DataFrame) is refused with the
/// fix (one column, or a batch).
pub(super) fn import_column(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensor>> {
    let Some(offer) = offer(obj)? else {
        return Ok(None);
    };
    let (field, array) = column(obj, offer)?;
    if let DataType::Struct(fields) = field.data_type() {
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        return Err(PyTypeError::new_err(format!(
            "expected one Arrow column, got a table of {} column{} ({}) from {}: pass one \
             column (table['name'], df['name']), or take the table as a TensorBatch",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            type_name(obj)
        )));
    }
    let tensor = column_to_tensor(&field, &array)?;
    Ok(Some(tensor.into_python().into_shared()))
}

/// A table of an Arrow producer (a record batch, a table, a DataFrame, a `datasets`
/// batch) as a batch, one tensor per column, named by the column: `None` when the
/// object speaks no Arrow.
pub(super) fn import_table(obj: &Bound<'_, PyAny>) -> PyResult<Option<TensorBatch>> {
    let Some(offer) = offer(obj)? else {
        return Ok(None);
    };
    let (field, array) = column(obj, offer)?;
    let DataType::Struct(_) = field.data_type() else {
        return Err(PyTypeError::new_err(format!(
            "expected an Arrow table (a record batch, a table, a DataFrame), got one column \
             of {} from {}: a column is one tensor, not a batch",
            field.data_type(),
            type_name(obj)
        )));
    };
    let structs = StructArray::from(array.to_data());
    if structs.null_count() != 0 {
        return Err(PyValueError::new_err(format!(
            "the Arrow table from {} has {} null rows: a tensor has no nulls (drop them \
             first: table.drop_null(), df.drop_nulls())",
            type_name(obj),
            structs.null_count()
        )));
    }
    let (fields, columns, _) = structs.into_parts();
    let schema = Arc::new(Schema::new(fields).with_metadata(field.metadata().clone()));
    let batch = RecordBatch::try_new(schema, columns).map_err(arrow_error)?;
    let tensors = record_batch_to_tensors(&batch)?;
    drop(batch);
    // Released as imports from Python are: the producer's release may run Python code.
    let mut batch = TensorBatch::with_capacity(tensors.len());
    *batch.metadata_mut() = tensors.metadata().clone();
    for (name, tensor) in tensors {
        batch.insert(name, tensor.into_python().into_shared())?;
    }
    Ok(Some(batch))
}

fn arrow_error(err: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(format!("invalid Arrow data: {err}"))
}

/// The one column an object offers, as arrow-rs arrays, read from its capsules.
fn column(obj: &Bound<'_, PyAny>, offer: Offer) -> PyResult<(Field, ArrayRef)> {
    let py = obj.py();
    match offer {
        Offer::Array => {
            let pair = obj.call_method0(intern!(py, "__arrow_c_array__"))?;
            let pair = pair
                .cast::<PyTuple>()
                .ok()
                .filter(|t| t.len() == 2)
                .ok_or_else(|| {
                    PyTypeError::new_err(format!(
                        "{}.__arrow_c_array__() returned {}, not a pair of capsules",
                        type_name(obj),
                        type_name(&pair)
                    ))
                })?;
            let schema = pair.get_item(0)?;
            let array = pair.get_item(1)?;
            let schema = capsule(obj, &schema, SCHEMA)?;
            let array = capsule(obj, &array, ARRAY)?;
            array_from_capsules(schema, array)
        }
        Offer::Stream => {
            let stream = obj.call_method0(intern!(py, "__arrow_c_stream__"))?;
            let stream = capsule(obj, &stream, STREAM)?;
            one_chunk(obj, stream)
        }
    }
}

/// `object` as a capsule named `name`, or the error saying what it is.
fn capsule<'a, 'py>(
    producer: &Bound<'py, PyAny>,
    object: &'a Bound<'py, PyAny>,
    name: &'static CStr,
) -> PyResult<&'a Bound<'py, PyCapsule>> {
    let wrong = || {
        PyTypeError::new_err(format!(
            "{}'s Arrow export gave {} where a capsule named {:?} belongs",
            type_name(producer),
            type_name(object),
            name
        ))
    };
    let capsule = object.cast::<PyCapsule>().map_err(|_| wrong())?;
    if capsule.is_valid_checked(Some(name)) {
        Ok(capsule)
    } else {
        Err(wrong())
    }
}

/// The pointer a capsule named `name` holds (checked non-null by the lookup), aligned
/// for `T`.
fn pointer<T>(capsule: &Bound<'_, PyCapsule>, name: &'static CStr) -> PyResult<NonNull<T>> {
    let pointer = capsule.pointer_checked(Some(name))?.cast::<T>();
    if !pointer.as_ptr().is_aligned() {
        return Err(PyValueError::new_err(format!(
            "the capsule named {name:?} holds a misaligned pointer"
        )));
    }
    Ok(pointer)
}

/// The column of a schema capsule and an array capsule: the schema read and checked,
/// the array moved out of its capsule (which is left released, as the interface's
/// consumers leave it) and checked against the schema's type before arrow-rs reads it.
fn array_from_capsules(
    schema: &Bound<'_, PyCapsule>,
    array: &Bound<'_, PyCapsule>,
) -> PyResult<(Field, ArrayRef)> {
    let schema_ptr = pointer::<FFI_ArrowSchema>(schema, SCHEMA)?;
    // Read under the capsule's lock, as the array is taken: a consumer that takes the
    // same lock cannot move the schema out meanwhile (on builds with a GIL, no other
    // consumer can).
    let field = pyo3::sync::critical_section::with_critical_section(schema.as_any(), || {
        // SAFETY:
        // - by the interface, a capsule named `arrow_schema` holds an `ArrowSchema`
        //   that stays valid while the capsule lives (it does: `schema` is borrowed for
        //   the call), checked non-null and aligned;
        // - no Python code runs while it is read, which could release or move it.
        unsafe { field_of(schema_ptr) }
    })?;
    let array_ptr = pointer::<FFI_ArrowArray>(array, ARRAY)?;
    // One consumer at a time among those that take the capsule's lock: the move out
    // below leaves a released struct for any later one.
    let moved = pyo3::sync::critical_section::with_critical_section(array.as_any(), || {
        // SAFETY:
        // - by the interface, a capsule named `arrow_array` holds an `ArrowArray`,
        //   valid while the capsule lives, checked non-null and aligned;
        // - `from_raw` moves it out and leaves a released struct (release NULL) in its
        //   place, which the capsule's destructor leaves alone, as the interface says.
        unsafe { FFI_ArrowArray::from_raw(array_ptr.as_ptr()) }
    });
    import_array(moved, field)
}

/// Reads and checks a producer's schema, then converts it.
///
/// # Safety
///
/// - `schema` points to an `ArrowSchema` that stays valid and unchanged for the call.
unsafe fn field_of(schema: NonNull<FFI_ArrowSchema>) -> PyResult<Field> {
    // SAFETY: the caller's contract; `CSchema` is the interface's layout, as
    // `FFI_ArrowSchema`'s (asserted below).
    unsafe { check_schema(schema.cast::<CSchema>().as_ptr(), 0, &mut 0) }.map_err(malformed)?;
    // SAFETY: valid for reads (the caller's contract), every pointer arrow-rs follows
    // checked above.
    let schema = unsafe { schema.as_ref() };
    Field::try_from(schema).map_err(arrow_error)
}

fn malformed(reason: String) -> PyErr {
    PyValueError::new_err(format!(
        "malformed Arrow C data from the producer: {reason}"
    ))
}

/// Takes a moved-out array of type `field`: refused (and released at once) unless its
/// type is one a tensor or a table of tensors can be, and its struct fits the type.
fn import_array(array: FFI_ArrowArray, field: Field) -> PyResult<(Field, ArrayRef)> {
    if array.is_released() {
        return Err(PyValueError::new_err(
            "the Arrow array capsule was already consumed: a capsule can be imported only once",
        ));
    }
    check_type(field.data_type(), 0, true).map_err(|reason| {
        PyTypeError::new_err(match field.data_type() {
            // (The reason names the column.)
            DataType::Struct(_) => format!(
                "Arrow table: {reason}; or take only the tensor columns (table.select([...]), \
                 df.select([...]))"
            ),
            _ if field.name().is_empty() => format!("Arrow column: {reason}"),
            _ => format!("Arrow column '{}': {reason}", field.name()),
        })
    })?;
    let raw = (&raw const array).cast::<CArray>();
    // SAFETY: `array` is a live, unreleased `ArrowArray` owned here, of the
    // interface's layout; the check follows only pointers it first finds non-null.
    unsafe { check_array(raw, field.data_type()) }.map_err(malformed)?;
    let schema = FFI_ArrowSchema::try_from(field.data_type()).map_err(arrow_error)?;
    // SAFETY:
    // - by the interface, the producer's buffers hold `offset + length` elements of the
    //   declared type (and the children what their parents need), valid until its
    //   release callback runs, which arrow-rs calls once, when the last buffer is
    //   dropped;
    // - every field arrow-rs follows for these types (buffer and child counts, lengths,
    //   offsets, non-null pointers) was checked above against the same type.
    let data = unsafe { from_ffi(array, &schema) }.map_err(arrow_error)?;
    data.validate().map_err(arrow_error)?;
    Ok((field, make_array(data)))
}

/// The one non-empty chunk of a stream capsule (a chunked array, a table, a Series, a
/// DataFrame): several are refused with the fix, none is an empty column.
fn one_chunk(
    producer: &Bound<'_, PyAny>,
    capsule: &Bound<'_, PyCapsule>,
) -> PyResult<(Field, ArrayRef)> {
    let pointer = pointer::<FFI_ArrowArrayStream>(capsule, STREAM)?;
    let stream = pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || {
        // SAFETY:
        // - by the interface, a capsule named `arrow_array_stream` holds an
        //   `ArrowArrayStream`, valid while the capsule lives, checked non-null and
        //   aligned;
        // - `from_raw` moves it out and leaves a released one in its place.
        unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr()) }
    });
    let mut stream = Stream(stream);
    let field = stream.field()?;
    let mut found: Option<ArrayRef> = None;
    while let Some(array) = stream.next()? {
        let (_, array) = import_array(array, field.clone())?;
        if array.is_empty() {
            continue;
        }
        if found.is_none() {
            found = Some(array);
            continue;
        }
        // A second chunk: refused at once (the stream may be endless).
        let fix = if matches!(field.data_type(), DataType::Struct(_)) {
            "table.combine_chunks(), df.rechunk()"
        } else {
            "chunked.combine_chunks(), series.rechunk()"
        };
        return Err(PyValueError::new_err(format!(
            "the Arrow stream of {} holds more than one chunk: a tensor is one buffer, so \
             one chunk is taken without a copy; combine them first ({fix}: one copy), or \
             pass the chunks one by one",
            type_name(producer)
        )));
    }
    let array = found.unwrap_or_else(|| arrow_array::new_empty_array(field.data_type()));
    Ok((field, array))
}

/// A producer's stream, moved out of its capsule: its callbacks checked before each
/// call, released once when dropped.
struct Stream(FFI_ArrowArrayStream);

impl Stream {
    /// The callbacks, or the error naming the one missing.
    fn callbacks(
        &self,
    ) -> PyResult<(
        unsafe extern "C" fn(*mut FFI_ArrowArrayStream, *mut FFI_ArrowSchema) -> i32,
        unsafe extern "C" fn(*mut FFI_ArrowArrayStream, *mut FFI_ArrowArray) -> i32,
    )> {
        if self.0.release().is_none() {
            return Err(PyValueError::new_err(
                "the Arrow stream capsule was already consumed: a stream can be read only once",
            ));
        }
        match (self.0.get_schema(), self.0.get_next()) {
            (Some(schema), Some(next)) => Ok((schema, next)),
            _ => Err(malformed(
                "a stream without get_schema or get_next".to_owned(),
            )),
        }
    }

    /// The producer's message for a failed call.
    fn failed(&mut self, call: &str, code: i32) -> PyErr {
        let mut message = format!("the Arrow stream's {call} failed (error {code})");
        if let Some(last_error) = self.0.get_last_error() {
            // SAFETY: the stream is live and unreleased (checked by `callbacks` before
            // the failed call), and the interface allows this call after an error.
            let text: *const c_char = unsafe { last_error(&raw mut self.0) };
            if !text.is_null() {
                // SAFETY: by the interface, a NUL-terminated string valid until the
                // next call on the stream; read at once.
                let text = unsafe { CStr::from_ptr(text) };
                message.push_str(": ");
                message.push_str(&text.to_string_lossy());
            }
        }
        PyValueError::new_err(message)
    }

    fn field(&mut self) -> PyResult<Field> {
        let (get_schema, _) = self.callbacks()?;
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: the stream is live and unreleased (checked); `schema` is a released
        // struct for the producer to fill.
        let code = unsafe { get_schema(&raw mut self.0, &raw mut schema) };
        if code != 0 {
            return Err(self.failed("get_schema", code));
        }
        if schema.release().is_none() {
            return Err(malformed("get_schema gave a released schema".to_owned()));
        }
        // SAFETY: `schema` is the producer's, filled above, live until dropped here.
        unsafe { field_of(NonNull::from(&mut schema)) }
    }

    /// The next array, `None` at the end.
    fn next(&mut self) -> PyResult<Option<FFI_ArrowArray>> {
        let (_, get_next) = self.callbacks()?;
        let mut array = FFI_ArrowArray::empty();
        // SAFETY: the stream is live and unreleased (checked); `array` is a released
        // struct for the producer to fill.
        let code = unsafe { get_next(&raw mut self.0, &raw mut array) };
        if code != 0 {
            return Err(self.failed("get_next", code));
        }
        Ok((!array.is_released()).then_some(array))
    }
}

/// Whether a column of `ty` can be a tensor (or, at the top, a table of them): the
/// numeric types and fixed-size lists of them, nested; a struct only at the top. What
/// the bridge reads; anything else is refused before its array is read, with the fix.
fn check_type(ty: &DataType, depth: usize, top: bool) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    match ty {
        DataType::FixedSizeList(item, _) => check_type(item.data_type(), depth + 1, false),
        DataType::Struct(fields) if top => fields.iter().try_for_each(|f| {
            check_type(f.data_type(), depth + 1, false)
                .map_err(|reason| format!("column '{}': {reason}", f.name()))
        }),
        number if is_numeric(number) => Ok(()),
        other => Err(type_reason(other)),
    }
}

/// The interface's `ArrowSchema`, field by field, for the checks.
#[repr(C)]
struct CSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut CSchema,
    dictionary: *mut CSchema,
    release: Option<unsafe extern "C" fn(*mut CSchema)>,
    private_data: *mut c_void,
}

/// The interface's `ArrowArray`, field by field, for the checks.
#[repr(C)]
struct CArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut CArray,
    dictionary: *mut CArray,
    release: Option<unsafe extern "C" fn(*mut CArray)>,
    private_data: *mut c_void,
}

const _: () = {
    assert!(size_of::<CSchema>() == size_of::<FFI_ArrowSchema>());
    assert!(align_of::<CSchema>() == align_of::<FFI_ArrowSchema>());
    assert!(size_of::<CArray>() == size_of::<FFI_ArrowArray>());
    assert!(align_of::<CArray>() == align_of::<FFI_ArrowArray>());
};

/// Most children a schema may have (a table's columns).
const MAX_CHILDREN: i64 = 1 << 20;
/// Most fields a schema may have in all, at every level.
const MAX_NODES: usize = 1 << 20;

/// Checks what arrow-rs's schema import follows: the struct is unreleased, its format
/// a UTF-8 string, its name UTF-8, its metadata's counts and lengths not negative, its
/// children and dictionary non-null where counted, recursively.
///
/// # Safety
///
/// - `schema` points to a readable `ArrowSchema` whose non-null pointers point where
///   the interface says (strings NUL-terminated, children arrays of `n_children`).
unsafe fn check_schema(
    schema: *const CSchema,
    depth: usize,
    nodes: &mut usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("a schema nested deeper than {MAX_DEPTH} levels"));
    }
    // Children may alias: a few structs could stand for an exponential tree, which the
    // conversion would then build.
    *nodes += 1;
    if *nodes > MAX_NODES {
        return Err(format!("a schema of more than {MAX_NODES} fields"));
    }
    // SAFETY: readable (the contract).
    let s = unsafe { &*schema };
    if s.release.is_none() {
        return Err("a released schema".to_owned());
    }
    if s.format.is_null() {
        return Err("a schema without a format string".to_owned());
    }
    // SAFETY: a non-null format is a NUL-terminated string (the contract).
    let format = unsafe { CStr::from_ptr(s.format) };
    format
        .to_str()
        .map_err(|_| "a format string that is not UTF-8".to_owned())?;
    if !s.name.is_null() {
        // SAFETY: a non-null name is a NUL-terminated string (the contract).
        let name = unsafe { CStr::from_ptr(s.name) };
        name.to_str()
            .map_err(|_| "a field name that is not UTF-8".to_owned())?;
    }
    if !s.metadata.is_null() {
        // SAFETY: non-null metadata is the interface's encoding (the contract).
        unsafe { check_metadata(s.metadata) }?;
    }
    if !(0..=MAX_CHILDREN).contains(&s.n_children) {
        return Err(format!("a schema with {} children", s.n_children));
    }
    // The children its format needs (arrow-rs reads them by index, asserting).
    let format = format.to_bytes();
    let needed = match format {
        b"+l" | b"+L" | b"+vl" | b"+vL" | b"+m" => Some(1),
        _ if format.starts_with(b"+w:") => Some(1),
        b"+r" => Some(2),
        b"+s" => None,
        _ if format.starts_with(b"+u") => None,
        _ => Some(0),
    };
    if needed.is_some_and(|n| n != s.n_children) {
        return Err(format!(
            "a schema of format {:?} with {} children",
            String::from_utf8_lossy(format),
            s.n_children
        ));
    }
    if s.n_children > 0 && s.children.is_null() {
        return Err("a schema whose children are NULL".to_owned());
    }
    for index in 0..s.n_children as usize {
        // SAFETY: `children` holds `n_children` pointers (the contract; non-null).
        let child = unsafe { s.children.wrapping_add(index).read_unaligned() };
        if child.is_null() {
            return Err(format!("a schema whose child {index} is NULL"));
        }
        // SAFETY: a non-null child is a readable schema (the contract).
        unsafe { check_schema(child, depth + 1, nodes) }?;
    }
    if !s.dictionary.is_null() {
        // SAFETY: a non-null dictionary is a readable schema (the contract).
        unsafe { check_schema(s.dictionary, depth + 1, nodes) }?;
    }
    Ok(())
}

/// Checks the counts and lengths of the interface's metadata encoding (an `int32`
/// count, then for each pair an `int32` length and the key's bytes, an `int32` length
/// and the value's bytes) and that keys and values are UTF-8, as arrow-rs expects.
///
/// # Safety
///
/// - `metadata` points to metadata in that encoding.
unsafe fn check_metadata(metadata: *const c_char) -> Result<(), String> {
    let mut at = metadata.cast::<u8>();
    // SAFETY: the encoding has an `int32` at `at` (the contract), read unaligned.
    let read_len = |at: *const u8| unsafe { at.cast::<i32>().read_unaligned() };
    let to_len = |len: i32| {
        usize::try_from(len).map_err(|_| format!("metadata with a negative length ({len})"))
    };
    let pairs = to_len(read_len(at))?;
    for _ in 0..pairs {
        for _ in 0..2 {
            at = at.wrapping_add(4);
            let len = to_len(read_len(at))?;
            // SAFETY: past that length, `len` bytes of the encoding follow (the contract).
            let bytes = unsafe { core::slice::from_raw_parts(at.wrapping_add(4), len) };
            core::str::from_utf8(bytes).map_err(|_| "metadata that is not UTF-8".to_owned())?;
            at = at.wrapping_add(len);
        }
    }
    Ok(())
}

/// Checks what arrow-rs's array import follows for `ty` (one of [`check_type`]'s):
/// the struct is unreleased; length, offset and null count are in range; it has the
/// type's buffer and child counts, with non-null arrays of them; the values buffer is
/// non-null and aligned for the element where there are elements; a fixed-size list's
/// child holds the items its rows need, and a struct's children the rows.
///
/// # Safety
///
/// - `array` points to a readable `ArrowArray` whose non-null pointers point where the
///   interface says (`buffers` and `children` arrays of their counts).
unsafe fn check_array(array: *const CArray, ty: &DataType) -> Result<(), String> {
    // SAFETY: readable (the contract).
    let a = unsafe { &*array };
    if a.release.is_none() {
        return Err("a released array".to_owned());
    }
    if a.length < 0 || a.offset < 0 || a.null_count < -1 {
        return Err(format!(
            "an array of length {}, offset {}, null count {}",
            a.length, a.offset, a.null_count
        ));
    }
    let end = a
        .length
        .checked_add(a.offset)
        .filter(|&end| isize::try_from(end).is_ok())
        .ok_or("an array whose offset and length overflow")?;
    let (buffers, children) = match ty {
        DataType::FixedSizeList(..) | DataType::Struct(_) => (1, 1),
        _ => (2, 0),
    };
    let children = match ty {
        DataType::Struct(fields) => fields.len() as i64,
        _ => children,
    };
    if a.n_buffers != buffers || a.n_children != children {
        return Err(format!(
            "an array of {ty} with {} buffers and {} children (expected {buffers} and \
             {children})",
            a.n_buffers, a.n_children
        ));
    }
    if a.buffers.is_null() {
        return Err("an array whose buffers are NULL".to_owned());
    }
    if children > 0 && a.children.is_null() {
        return Err("an array whose children are NULL".to_owned());
    }
    if !a.dictionary.is_null() {
        return Err(format!("an array of {ty} with a dictionary"));
    }
    let child = |index: usize| -> Result<*const CArray, String> {
        // SAFETY: `children` holds `n_children` pointers (the contract; non-null).
        let child = unsafe { a.children.wrapping_add(index).read_unaligned() };
        if child.is_null() {
            Err(format!("an array whose child {index} is NULL"))
        } else {
            Ok(child)
        }
    };
    // SAFETY: a readable child (the contract), its length read only.
    let length_of = |child: *const CArray| unsafe { (*child).length };
    match ty {
        DataType::FixedSizeList(item, size) => {
            let items = i64::from(*size)
                .checked_mul(end)
                .ok_or("a fixed-size list whose item count overflows")?;
            let child = child(0)?;
            if length_of(child) < items {
                return Err(format!(
                    "a fixed-size list of {end} rows of {size} with {} items",
                    length_of(child)
                ));
            }
            // SAFETY: a readable child (the contract).
            unsafe { check_array(child, item.data_type()) }
        }
        DataType::Struct(fields) => {
            for (index, field) in fields.iter().enumerate() {
                let child = child(index)?;
                if length_of(child) < end {
                    return Err(format!(
                        "column '{}' with {} rows in a table of {end}",
                        field.name(),
                        length_of(child)
                    ));
                }
                // SAFETY: a readable child (the contract).
                unsafe { check_array(child, field.data_type()) }?;
            }
            Ok(())
        }
        _ => {
            // SAFETY: `buffers` holds `n_buffers` (2) pointers (the contract; non-null).
            let values = unsafe { a.buffers.wrapping_add(1).read_unaligned() };
            let align = ty.primitive_width().unwrap_or(1);
            if end > 0 && values.is_null() {
                return Err("an array with elements and no values buffer".to_owned());
            }
            if end > 0 && (values as usize) % align != 0 {
                return Err(format!(
                    "values of {ty} at address {:#x}, not aligned to {align} bytes: read \
                     the data with aligned buffers (an IPC file, or a copy)",
                    values as usize
                ));
            }
            Ok(())
        }
    }
}
