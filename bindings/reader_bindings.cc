// Thin shims over the C++ reader: numpy arrays that view the file mapping, GIL released while
// decoding.
#include "reader_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "status.h"
#include "xdl_trace/reader.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// numpy dtype per wire dtype. kByte reads as uint8; bfloat16 has no numpy type,
// so its raw bits come back as uint16 (xdl_trace.reader converts on request).
const py::dtype& NumpyDType(DType dtype) {
  // Created once with the GIL held and never destroyed (no teardown order issues).
  static const std::vector<py::dtype>* table = [] {
    auto* t = new std::vector<py::dtype>();
    for (const char* name : {"int8", "int16", "int32", "int64", "float32", "float64", "bool",
                             "uint8", "uint8", "uint16", "uint32", "uint64", "float16", "uint16"}) {
      t->push_back(py::dtype(std::string(name)));
    }
    return t;
  }();
  return (*table)[static_cast<size_t>(dtype)];
}

// A TraceFile plus a read-only uint8 array over its whole mapping. Every
// column array is a view with that array as its base, so the mapping lives as
// long as any array read from it.
struct PyTraceFile {
  std::shared_ptr<TraceFile> file;
  py::array mapping;
};

py::array MappingArray(const std::shared_ptr<TraceFile>& file) {
  static const char kEmpty = 0;
  auto* owner = new std::shared_ptr<TraceFile>(file);
  py::capsule keep_alive(owner,
                         [](void* p) { delete static_cast<std::shared_ptr<TraceFile>*>(p); });
  const char* data = file->size() > 0 ? file->bytes().data() : &kEmpty;
  py::array array(py::dtype("uint8"), {static_cast<py::ssize_t>(file->size())}, {}, data,
                  keep_alive);
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

py::array ColumnArray(const PyTraceFile& self, const ColumnView& column) {
  std::vector<py::ssize_t> shape;
  if (column.empty()) {
    shape.push_back(0);
  } else {
    shape.assign(column.shape.begin(), column.shape.end());
  }
  const char* data = column.data.data() != nullptr ? column.data.data() : self.file->bytes().data();
  if (data == nullptr) return py::array(NumpyDType(column.dtype), shape);
  return py::array(NumpyDType(column.dtype), shape, {}, data, self.mapping);
}

py::object MetaToDict(const std::optional<FileMeta>& meta) {
  if (!meta.has_value()) return py::none();
  py::dict d;
  d["lstep_begin"] = meta->lstep_begin;
  d["lstep_end"] = meta->lstep_end;
  d["gstep_begin"] = meta->gstep_begin;
  d["gstep_end"] = meta->gstep_end;
  d["timestamp_begin"] = meta->timestamp_begin;
  d["timestamp_end"] = meta->timestamp_end;
  d["rank"] = meta->rank;
  d["file_index"] = meta->file_index;
  d["record_count"] = meta->record_count;
  d["data_bytes"] = meta->data_bytes;
  d["crc32c"] = meta->crc32c;
  d["run_id"] = meta->run_id;
  d["format_version"] = meta->format_version;
  d["dropped_records"] = meta->dropped_records;
  d["closed_cleanly"] = meta->closed_cleanly;
  return std::move(d);
}

py::dict InfoToDict(const TraceFileInfo& info) {
  py::dict d;
  d["path"] = info.path;
  d["prefix"] = info.prefix;
  d["name"] = info.name;
  d["rank"] = info.rank;
  d["index"] = info.index;
  return d;
}

bool InRange(int64_t gstep, const std::optional<int64_t>& begin,
             const std::optional<int64_t>& end) {
  return (!begin || gstep >= *begin) && (!end || gstep <= *end);
}

// Decodes up to `max_records` records from `offset` (GIL released), then
// builds (gstep, lstep, timestamp_ms, [arrays], extra) tuples. Returns
// (records, next_offset, state) with state "more", "end" or "torn" (then
// next_offset is where the torn frame starts). Corruption raises, but only
// once the records before it were returned.
py::tuple Read(const PyTraceFile& self, uint64_t offset, int64_t max_records,
               std::optional<std::vector<int>> key_indices, std::optional<int64_t> gstep_begin,
               std::optional<int64_t> gstep_end) {
  const size_t num_keys = self.file->keys().size();
  if (key_indices) {
    for (int k : *key_indices) {
      if (k < 0 || static_cast<size_t>(k) >= num_keys) {
        throw py::index_error(
            absl::StrCat("key index ", k, " out of range for ", num_keys, " keys"));
      }
    }
  }
  std::vector<RecordView> records;
  absl::Status status;
  const char* state = "more";
  {
    py::gil_scoped_release release;
    RecordCursor cursor = self.file->Records();
    cursor.Seek(offset);
    RecordView record;
    while (static_cast<int64_t>(records.size()) < max_records) {
      if (!cursor.Next(&record)) {
        status = cursor.status();
        state = cursor.torn_tail() ? "torn" : "end";
        break;
      }
      if (InRange(record.gstep, gstep_begin, gstep_end)) records.push_back(record);
    }
    offset = cursor.torn_tail() ? cursor.torn_offset() : cursor.offset();
  }
  if (!status.ok()) {
    if (records.empty()) ThrowIfError(status);
    state = "more";  // The next call starts at the corrupt frame and raises.
  }
  py::list out(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const RecordView& r = records[i];
    py::list arrays;
    if (key_indices) {
      for (int k : *key_indices) arrays.append(ColumnArray(self, r.columns[k]));
    } else {
      for (const ColumnView& c : r.columns) arrays.append(ColumnArray(self, c));
    }
    py::object extra = py::none();
    if (!r.extra_fields.empty()) {
      py::list fields;
      for (const RawField& f : r.extra_fields) {
        fields.append(
            py::make_tuple(f.number, f.wire_type, py::bytes(f.payload.data(), f.payload.size())));
      }
      extra = std::move(fields);
    }
    out[i] = py::make_tuple(r.gstep, r.lstep, r.timestamp_ms, std::move(arrays), std::move(extra),
                            r.offset);
  }
  return py::make_tuple(std::move(out), offset, state);
}

// Copies each key of `key_indices` over every record of the file (gstep
// range applied, empty columns skipped) in one pass. Returns a list of
// (gsteps int64[n], values[n, *shape] or None) per key and whether the file
// ends torn. A key's shape and dtype must agree across records.
py::tuple Stack(const PyTraceFile& self, const std::vector<int>& key_indices,
                std::optional<int64_t> gstep_begin, std::optional<int64_t> gstep_end) {
  const auto& keys = self.file->keys();
  for (int k : key_indices) {
    if (k < 0 || static_cast<size_t>(k) >= keys.size()) {
      throw py::index_error(absl::StrCat("key index ", k, " out of range"));
    }
  }
  struct Rows {
    std::vector<int64_t> gsteps;
    std::vector<absl::string_view> data;
    ColumnView first;
  };
  std::vector<Rows> rows(key_indices.size());
  bool torn = false;
  absl::Status status;
  {
    py::gil_scoped_release release;
    RecordCursor cursor = self.file->Records();
    RecordView record;
    while (status.ok() && cursor.Next(&record)) {
      if (!InRange(record.gstep, gstep_begin, gstep_end)) continue;
      for (size_t i = 0; i < key_indices.size(); ++i) {
        const ColumnView& c = record.columns[key_indices[i]];
        if (c.empty()) continue;
        Rows& r = rows[i];
        if (r.data.empty()) {
          r.first = c;
        } else if (c.dtype != r.first.dtype || c.shape != r.first.shape) {
          status = absl::InvalidArgumentError(
              absl::StrCat(self.file->path(), ": key '", keys[key_indices[i]],
                           "' changes dtype or shape at gstep ", record.gstep, " (byte offset ",
                           record.offset, "); stack needs one shape"));
          break;
        }
        r.gsteps.push_back(record.gstep);
        r.data.push_back(c.data);
      }
    }
    if (status.ok()) status = cursor.status();
    torn = cursor.torn_tail();
  }
  ThrowIfError(status);
  py::list out;
  for (Rows& r : rows) {
    py::array_t<int64_t> gstep_array(static_cast<py::ssize_t>(r.gsteps.size()));
    std::memcpy(gstep_array.mutable_data(), r.gsteps.data(), r.gsteps.size() * sizeof(int64_t));
    if (r.data.empty()) {
      out.append(py::make_tuple(gstep_array, py::none()));
      continue;
    }
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(r.data.size())};
    shape.insert(shape.end(), r.first.shape.begin(), r.first.shape.end());
    py::array values(NumpyDType(r.first.dtype), shape);
    char* dst = static_cast<char*>(values.mutable_data());
    const size_t row_bytes = r.first.data.size();
    {
      py::gil_scoped_release release;
      for (size_t i = 0; i < r.data.size(); ++i) {
        std::memcpy(dst + i * row_bytes, r.data[i].data(), row_bytes);
      }
    }
    out.append(py::make_tuple(gstep_array, values));
  }
  return py::make_tuple(std::move(out), torn);
}

// The wire dtype name ("bfloat16", "byte", ...) and shape of each column of
// the record at `offset`, or None when the file holds no record there.
py::object Describe(const PyTraceFile& self, uint64_t offset) {
  RecordCursor cursor = self.file->Records();
  cursor.Seek(offset);
  RecordView record;
  if (!cursor.Next(&record)) {
    ThrowIfError(cursor.status());
    return py::none();
  }
  py::list out;
  for (const ColumnView& c : record.columns) {
    py::tuple shape(c.shape.size());
    for (size_t i = 0; i < c.shape.size(); ++i) shape[i] = c.shape[i];
    out.append(py::make_tuple(std::string(DTypeName(c.dtype)), shape, c.empty()));
  }
  return std::move(out);
}

py::dict VerifyToDict(const VerifyReport& r) {
  py::dict d;
  d["ok"] = r.ok;
  d["has_meta"] = r.has_meta;
  d["file_bytes"] = r.file_bytes;
  d["meta_data_bytes"] = r.meta_data_bytes;
  d["meta_record_count"] = r.meta_record_count;
  d["records_counted"] = r.records_counted;
  d["crc_expected"] = r.crc_expected;
  d["crc_actual"] = r.crc_actual;
  d["unverified_tail_bytes"] = r.unverified_tail_bytes;
  d["torn_tail"] = r.torn_tail;
  d["problems"] = r.problems;
  return d;
}

}  // namespace

void RegisterReaderBindings(py::module_& m) {
  py::class_<PyTraceFile>(m, "TraceFile", "One mmap'd trace data file (xdl_trace::TraceFile).")
      .def_static(
          "open",
          [](const std::string& path) {
            std::shared_ptr<TraceFile> file = CallWithoutGil([&] { return TraceFile::Open(path); });
            return PyTraceFile{file, MappingArray(file)};
          },
          py::arg("path"))
      .def_property_readonly("path", [](const PyTraceFile& f) { return f.file->path(); })
      .def_property_readonly("keys", [](const PyTraceFile& f) { return f.file->keys(); })
      .def_property_readonly("size", [](const PyTraceFile& f) { return f.file->size(); })
      .def_property_readonly("first_record_offset",
                             [](const PyTraceFile& f) { return f.file->first_record_offset(); })
      .def_property_readonly("header_torn",
                             [](const PyTraceFile& f) { return f.file->header_torn(); })
      .def_property_readonly("meta",
                             [](const PyTraceFile& f) { return MetaToDict(f.file->meta()); })
      .def_property_readonly("meta_error",
                             [](const PyTraceFile& f) -> py::object {
                               if (f.file->meta_error().ok()) return py::none();
                               return py::str(std::string(f.file->meta_error().message()));
                             })
      .def_property_readonly("mapping", [](const PyTraceFile& f) { return f.mapping; })
      .def("read", &Read, py::arg("offset"), py::arg("max_records"),
           py::arg("key_indices") = py::none(), py::arg("gstep_begin") = py::none(),
           py::arg("gstep_end") = py::none())
      .def("stack", &Stack, py::arg("key_indices"), py::arg("gstep_begin") = py::none(),
           py::arg("gstep_end") = py::none())
      .def("describe", &Describe, py::arg("offset"))
      .def("verify", [](const PyTraceFile& f) {
        VerifyReport report;
        {
          py::gil_scoped_release release;
          report = f.file->Verify();
        }
        return VerifyToDict(report);
      });

  m.def(
      "list_trace_files",
      [](const std::string& dir, const std::string& prefix, const std::string& name) {
        const std::vector<TraceFileInfo> files =
            CallWithoutGil([&] { return ListTraceFiles(dir, prefix, name); });
        py::list out;
        for (const auto& f : files) out.append(InfoToDict(f));
        return out;
      },
      py::arg("dir"), py::arg("prefix") = "train", py::arg("name") = "trace");
  m.def(
      "parse_trace_file_name",
      [](const std::string& base_name) -> py::object {
        TraceFileInfo info;
        if (!ParseTraceFileName(base_name, &info)) return py::none();
        return InfoToDict(info);
      },
      py::arg("base_name"));
  m.def(
      "parse_meta",
      [](py::bytes data) { return MetaToDict(ValueOrThrow(ParseFileMeta(std::string(data)))); },
      py::arg("data"));
}

}  // namespace python
}  // namespace xdl_trace
