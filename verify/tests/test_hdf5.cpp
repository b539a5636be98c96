// The RAII layer over the HDF5 C API: every stored type reads back exactly, attributes of both
// string kinds, member listing, compression, and errors that name the file and the object.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "synthetic_capture.h"
#include "verify/hdf5/error.h"
#include "verify/hdf5/file.h"

using namespace dsv4::verify;
using dsv4::verify::testing::TempFile;

namespace {

// The Error thrown by f, with its message checked to be one line starting with the file name.
template <typename F>
hdf5::Error error_of(F f, const std::string& file) {
  try {
    f();
  } catch (const hdf5::Error& e) {
    std::string message = e.what();
    CHECK(message.rfind(file + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
    return e;
  }
  FAIL("no hdf5::Error thrown");
  return hdf5::Error("", "", "", "");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("hdf5: datasets of every stored type read back exactly, with their shape and type") {
  TempFile f("hdf5-types");
  const std::vector<float> f32{1.5f, -0.25f, 3.0e-8f, -INFINITY, 65504.0f, 1.0f / 3.0f};
  const std::vector<double> f64{0.1, -1e300, 2.0 / 3.0, 4.9e-324};
  const std::vector<int32_t> i32{-1, 0, 7, 2147483647};
  const std::vector<int64_t> i64{-1, 9007199254740993LL, -9007199254740993LL};
  {
    hdf5::File file = hdf5::File::create(f.path);
    file.write<float>("a/f32", {2, 3}, f32);
    file.write<double>("f64", {4}, f64);
    file.write<int32_t>("a/b/i32", {1, 2, 2}, i32);
    file.write<int64_t>("i64", {3}, i64);
    file.write<float>("empty", {2, 0, 5}, std::span<const float>());
  }
  hdf5::File file = hdf5::File::open(f.path);

  hdf5::Array<double> a = file.dataset("a/f32").read<double>();
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  for (std::size_t i = 0; i < f32.size(); ++i) CHECK(a.values[i] == static_cast<double>(f32[i]));
  CHECK(file.dataset("a/f32").type().name == "float32");

  CHECK(file.dataset("f64").read<double>().values == f64);
  CHECK(file.dataset("f64").type().name == "float64");

  hdf5::Dataset d32 = file.dataset("a/b/i32");
  CHECK(d32.path() == "/a/b/i32");
  CHECK(d32.type().name == "int32");
  CHECK(d32.read<int64_t>().values == std::vector<int64_t>{-1, 0, 7, 2147483647});
  CHECK(d32.read<double>().values == std::vector<double>{-1, 0, 7, 2147483647});

  // int64 beyond 2^53 survives (read as int64, not through double).
  CHECK(file.dataset("i64").read<int64_t>().values == i64);

  hdf5::Array<double> empty = file.dataset("empty").read<double>();
  CHECK(empty.shape == std::vector<int64_t>{2, 0, 5});
  CHECK(empty.values.empty());
}

TEST_CASE("hdf5: attributes: integers, floats, and strings of both HDF5 kinds") {
  TempFile f("hdf5-attrs");
  {
    hdf5::File file = hdf5::File::create(f.path);
    hdf5::Group g = file.create_group("g");
    g.set_attribute("i", int64_t{-7});
    g.set_attribute("x", 0.125);
    g.set_attribute("s", std::string("héllo"));  // variable-length UTF-8, as h5py writes str
    g.set_attribute("s", std::string("replaced"));
    // Fixed-length strings, as numpy bytes give: NUL-padded and space-padded.
    for (auto [name, pad, text] :
         {std::tuple{"fixed_null", H5T_STR_NULLPAD, "abc\0\0\0"}, std::tuple{"fixed_term", H5T_STR_NULLTERM, "abcde\0"},
          std::tuple{"fixed_space", H5T_STR_SPACEPAD, "ab c  "}}) {
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, 6);
      H5Tset_strpad(type, pad);
      hid_t space = H5Screate(H5S_SCALAR);
      hid_t attr = H5Acreate2(g.id(), name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(attr >= 0);
      H5Awrite(attr, type, text);
      H5Aclose(attr);
      H5Sclose(space);
      H5Tclose(type);
    }
    // A three-element attribute: not a single value.
    hsize_t three = 3;
    hid_t space = H5Screate_simple(1, &three, nullptr);
    hid_t attr = H5Acreate2(g.id(), "array", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int64_t values[3] = {1, 2, 3};
    H5Awrite(attr, H5T_NATIVE_INT64, values);
    H5Aclose(attr);
    H5Sclose(space);
    g.set_attribute("gone", int64_t{1});
    g.remove_attribute("gone");
  }
  hdf5::File file = hdf5::File::open(f.path);
  hdf5::Group g = file.group("g");
  CHECK(std::get<int64_t>(g.attribute("i").read()) == -7);
  CHECK(std::get<double>(g.attribute("x").read()) == 0.125);
  CHECK(std::get<std::string>(g.attribute("s").read()) == "replaced");
  CHECK(std::get<std::string>(g.attribute("fixed_null").read()) == "abc");
  CHECK(std::get<std::string>(g.attribute("fixed_term").read()) == "abcde");
  CHECK(std::get<std::string>(g.attribute("fixed_space").read()) == "ab c");
  CHECK(g.attribute("s").type().variable_length);
  CHECK_FALSE(g.has_attribute("gone"));
  CHECK(g.attribute_names() ==
        std::vector<std::string>{"array", "fixed_null", "fixed_space", "fixed_term", "i", "s", "x"});

  hdf5::Error e = error_of([&] { g.attribute("array").read(); }, f.path);
  CHECK(e.object() == "/g: attribute 'array'");
  CHECK(e.expected() == "a single value");
  CHECK(e.found() == "3 values of type int64");

  e = error_of([&] { g.attribute("missing"); }, f.path);
  CHECK(e.object() == "/g");
  CHECK(e.expected() == "attribute 'missing'");
  CHECK(e.found() == "nothing");
}

TEST_CASE("hdf5: members, navigation, and links that are not followed") {
  TempFile f("hdf5-members");
  {
    hdf5::File file = hdf5::File::create(f.path);
    file.write<float>("g/d", {1}, std::vector<float>{1.0f});
    file.create_group("g/sub/deeper");
    H5Lcreate_soft("/g/d", file.id(), "soft", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_external("elsewhere.h5", "/x", file.id(), "external", H5P_DEFAULT, H5P_DEFAULT);
  }
  hdf5::File file = hdf5::File::open(f.path);
  std::vector<hdf5::Member> members = file.members();
  REQUIRE(members.size() == 3);
  CHECK(members[0].name == "external");
  CHECK(members[0].kind == hdf5::Member::Kind::link);
  CHECK(members[1].name == "g");
  CHECK(members[1].kind == hdf5::Member::Kind::group);
  CHECK(members[2].kind == hdf5::Member::Kind::link);
  CHECK(file.kind_of("g/d") == hdf5::Member::Kind::dataset);
  CHECK(file.kind_of("g/sub/deeper") == hdf5::Member::Kind::group);
  CHECK(file.kind_of("g/d/x") == hdf5::Member::Kind::other);
  CHECK(file.kind_of("g/nothing/x") == hdf5::Member::Kind::other);
  CHECK(file.group("g").group("sub").path() == "/g/sub");

  hdf5::Error e = error_of([&] { file.dataset("g/sub"); }, f.path);
  CHECK(e.object() == "/g/sub");
  CHECK(e.expected() == "a dataset");
  CHECK(e.found() == "a group");
  e = error_of([&] { file.dataset("soft"); }, f.path);
  CHECK(contains(e.found(), "soft or external link"));
  e = error_of([&] { file.group("g").dataset("missing"); }, f.path);
  CHECK(e.object() == "/g/missing");
  CHECK(e.found() == "nothing");
  e = error_of([&] { file.dataset("g/d").read<int64_t>(); }, f.path);
  CHECK(e.expected() == "an integer dataset");
  CHECK(e.found() == "float32");
}

TEST_CASE("hdf5: compressed datasets are chunked, shuffled and gzipped, and read back exactly") {
  TempFile f("hdf5-gzip");
  std::vector<float> values(3 * 700 * 300);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 251) * 0.5f;
  {
    hdf5::File file = hdf5::File::create(f.path);
    file.write<float>("z", {3, 700, 300}, values, {.compress = true, .gzip_level = 6});
  }
  hdf5::File file = hdf5::File::open(f.path);
  hdf5::Dataset z = file.dataset("z");
  hid_t plist = H5Dget_create_plist(z.id());
  CHECK(H5Pget_layout(plist) == H5D_CHUNKED);
  REQUIRE(H5Pget_nfilters(plist) == 2);
  CHECK(H5Pget_filter2(plist, 0, nullptr, nullptr, nullptr, 0, nullptr, nullptr) == H5Z_FILTER_SHUFFLE);
  CHECK(H5Pget_filter2(plist, 1, nullptr, nullptr, nullptr, 0, nullptr, nullptr) == H5Z_FILTER_DEFLATE);
  H5Pclose(plist);
  hdf5::Array<double> back = z.read<double>();
  CHECK(back.values == std::vector<double>(values.begin(), values.end()));
  // 2.5 MB of values with 251 distinct patterns: gzip must shrink it well below raw size.
  CHECK(std::filesystem::file_size(f.path) < values.size() * sizeof(float) / 4);
}

TEST_CASE("hdf5: opening says whether the file is missing, not HDF5, or damaged") {
  hdf5::Error e = error_of([] { hdf5::File::open("/nonexistent/dir/capture.h5"); }, "/nonexistent/dir/capture.h5");
  CHECK(e.found() == "no such file");

  TempFile text("hdf5-text");
  std::ofstream(text.path) << "not an HDF5 file\n";
  e = error_of([&] { hdf5::File::open(text.path); }, text.path);
  CHECK(e.expected() == "an HDF5 file");
  CHECK(e.found() == "a file without the HDF5 signature");

  TempFile truncated("hdf5-truncated");
  {
    hdf5::File file = hdf5::File::create(truncated.path);
    file.write<double>("d", {1000}, std::vector<double>(1000, 1.0));
  }
  std::filesystem::resize_file(truncated.path, std::filesystem::file_size(truncated.path) / 2);
  e = error_of([&] { hdf5::File::open(truncated.path); }, truncated.path);
  CHECK(e.expected() == "a readable HDF5 file");
  CHECK(contains(e.found(), "HDF5 error: "));
  CHECK(contains(e.found(), "truncated"));
}

TEST_CASE("hdf5: a fixed-length string attribute longer than 1 MiB is refused before it is read") {
  TempFile f("hdf5-long-string");
  {
    // Attributes over 64 KiB need the dense attribute storage of the newer file format.
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t file = H5Fcreate(f.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    REQUIRE(file >= 0);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, (std::size_t{1} << 20) + 1);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "long", type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(attr >= 0);
    std::string text((std::size_t{1} << 20) + 1, 'a');
    H5Awrite(attr, type, text.data());
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
    H5Pclose(fapl);
  }
  hdf5::File file = hdf5::File::open(f.path);
  hdf5::Error e = error_of([&] { file.attribute("long").read(); }, f.path);
  CHECK(e.object() == "/: attribute 'long'");
  CHECK(e.expected() == "a string of at most 1048576 bytes");
  CHECK(e.found() == "1048577 bytes");
}
