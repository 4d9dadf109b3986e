// Keeps spec/layout.md honest: the offset tables printed on that page are
// regenerated here from spec/layout.hpp and compared line by line, so the
// page cannot drift from the header. On a mismatch the test prints the
// table it expected, ready to paste between the marker comments.
// Keeps README.md a short user page whose operation table is the operation table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4kv/spec/layout.hpp"
#include "dsv4kv/spec/op_table.hpp"

namespace {

namespace L = dsv4kv::spec;

std::string range(int64_t first, int64_t last) { return std::to_string(first) + ".." + std::to_string(last); }

// The per-token offset table of one block, one row per position.
std::vector<std::string> token_table(int64_t B) {
  std::vector<std::string> rows = {
      "| p | FP8 codes | RoPE (bf16) | scale bytes, tiles 0..6 | pad byte |",
      "|--:|---|---|---|--:|",
  };
  for (int64_t p = 0; p < B; ++p) {
    std::ostringstream s;
    s << "| " << p << " | " << range(L::token_data_offset(p), L::rope_offset(p) - 1) << " | "
      << range(L::rope_offset(p), L::token_data_offset(p) + L::kTokenDataBytes - 1) << " | "
      << range(L::scale_offset(B, p, 0), L::scale_offset(B, p, L::kNumTiles - 1)) << " | "
      << L::scale_offset(B, p, L::kScalePadIndex) << " |";
    rows.push_back(s.str());
  }
  return rows;
}

// The region table of one block for a few block strides (minimum, unaligned, vLLM's).
std::vector<std::string> region_table(int64_t B) {
  std::vector<std::string> rows = {
      "| block_stride | token records | scale records | untouched tail | tail bytes |",
      "|--:|---|---|---|--:|",
  };
  const int64_t used = L::block_data_bytes(B);
  const int64_t strides[] = {used, used + 2, L::vllm_block_stride(B)};
  for (int64_t stride : strides) {
    std::ostringstream s;
    s << "| " << stride << " | " << range(0, L::scale_region_offset(B) - 1) << " | "
      << range(L::scale_region_offset(B), used - 1) << " | "
      << (stride > used ? range(used, stride - 1) : std::string("(none)")) << " | " << stride - used << " |";
    rows.push_back(s.str());
  }
  return rows;
}

// Where the spec sources are: DSV4KV_SOURCE_DIR from the environment (binaries
// carried to another machine), else the compile-time project root.
std::string source_dir() {
  if (const char* env = std::getenv("DSV4KV_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
#ifdef DSV4KV_SOURCE_DIR
  return DSV4KV_SOURCE_DIR;
#else
  return ".";
#endif
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The non-blank lines strictly between `<!-- begin -->` and `<!-- end -->`.
std::vector<std::string> marked_lines(const std::string& page, const std::string& begin, const std::string& end,
                                      std::string* error) {
  std::istringstream in(page);
  std::string line;
  std::vector<std::string> out;
  int state = 0;  // 0 before, 1 inside, 2 after
  int begins = 0;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t == begin) {
      ++begins;
      state = 1;
      continue;
    }
    if (t == end && state == 1) {
      state = 2;
      continue;
    }
    if (state == 1 && !t.empty()) out.push_back(t);
  }
  if (begins != 1)
    *error = "expected exactly one '" + begin + "' marker, found " + std::to_string(begins);
  else if (state != 2)
    *error = "no '" + end + "' marker after '" + begin + "'";
  return out;
}

std::string read_file(const std::string& relative) {
  const std::string path = source_dir() + "/" + relative;
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string read_page() { return read_file("spec/layout.md"); }

std::string join(const std::vector<std::string>& rows) {
  std::string s;
  for (const auto& r : rows) s += r + "\n";
  return s;
}

void expect_table(const std::string& page, const std::string& begin, const std::string& end,
                  const std::vector<std::string>& expected) {
  std::string error;
  const auto got = marked_lines(page, begin, end, &error);
  ASSERT_TRUE(error.empty()) << "spec/layout.md: " << error;
  for (size_t i = 0; i < expected.size() || i < got.size(); ++i) {
    const std::string e = i < expected.size() ? expected[i] : "(no line)";
    const std::string g = i < got.size() ? got[i] : "(no line)";
    ASSERT_EQ(g, e) << "spec/layout.md table '" << begin << "' differs from spec/layout.hpp at table line " << i
                    << ".\nThe header gives this table:\n"
                    << begin << "\n"
                    << join(expected) << end;
  }
}

TEST(LayoutDoc, PageExists) {
  EXPECT_FALSE(read_page().empty()) << "cannot read " << source_dir()
                                    << "/spec/layout.md (set DSV4KV_SOURCE_DIR to the repository root)";
}

TEST(LayoutDoc, TokenOffsetTableForBlockSize64MatchesHeader) {
  const std::string page = read_page();
  if (page.empty()) GTEST_SKIP() << "spec/layout.md not readable under " << source_dir();
  expect_table(page, "<!-- offset-table:begin block_size=64 -->", "<!-- offset-table:end -->", token_table(64));
}

TEST(LayoutDoc, RegionTableForBlockSize64MatchesHeader) {
  const std::string page = read_page();
  if (page.empty()) GTEST_SKIP() << "spec/layout.md not readable under " << source_dir();
  expect_table(page, "<!-- region-table:begin block_size=64 -->", "<!-- region-table:end -->", region_table(64));
}

// The generator itself must agree with the worked numbers the page's prose uses,
// so a bug in both the generator and the header cannot cancel out unnoticed.
TEST(LayoutDoc, GeneratorAgreesWithHandComputedRows) {
  const auto t = token_table(64);
  ASSERT_EQ(t.size(), 2u + 64u);
  EXPECT_EQ(t[2], "| 0 | 0..447 | 448..575 | 36864..36870 | 36871 |");
  EXPECT_EQ(t[3], "| 1 | 576..1023 | 1024..1151 | 36872..36878 | 36879 |");
  EXPECT_EQ(t.back(), "| 63 | 36288..36735 | 36736..36863 | 37368..37374 | 37375 |");
  const auto r = region_table(64);
  EXPECT_EQ(r[2], "| 37376 | 0..36863 | 36864..37375 | (none) | 0 |");
  EXPECT_EQ(r[3], "| 37378 | 0..36863 | 36864..37375 | 37376..37377 | 2 |");
  EXPECT_EQ(r[4], "| 37440 | 0..36863 | 36864..37375 | 37376..37439 | 64 |");
}

// The "2 GiB" figure: the largest number of blocks of vLLM's stride (block size 64) whose every byte
// offset is below 2^31. The pages that mention it must all give this one number.
TEST(LayoutDoc, TwoGiBBlockFigureIsTheHeadersEverywhere) {
  const int64_t stride = L::vllm_block_stride(64);
  const int64_t n = (int64_t{1} << 31) / stride;
  ASSERT_LE(L::block_offset(n, stride), int64_t{1} << 31);
  ASSERT_GT(L::block_offset(n + 1, stride), int64_t{1} << 31);
  const std::string want = std::to_string(n / 1000) + "," + std::to_string(n % 1000 + 1000).substr(1);
  EXPECT_EQ(want, "57,358");
  const std::regex figure(R"(\b57[,.]?[0-9]{3}\b)");
  for (const std::string page : {"spec/layout.md", "spec/failure_model.md", "README.md"}) {
    const std::string text = read_file(page);
    if (text.empty()) GTEST_SKIP() << page << " not readable under " << source_dir();
    std::set<std::string> found;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), figure); it != std::sregex_iterator(); ++it)
      found.insert(it->str());
    EXPECT_EQ(found, std::set<std::string>{want}) << page << " states another block figure than " << want;
  }
}

// README.md's operation table (between `<!-- operations:begin -->` and `<!-- operations:end -->`):
// its rows name, in their first column, exactly the operations of DSV4KV_OPS (each Args::kName), in
// table order; its second column is each operation's short name, the stem DSV4KV_OPS gives it (the
// third argument of each entry; that check is left out while an entry has none).

// The cells of one Markdown table row, trimmed, backticks removed ("\|" is a '|' inside a cell).
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      out.push_back(trim(cell));
      cell.clear();
    } else if (row[i] != '`') {
      cell += row[i];
    }
  }
  if (!trim(cell).empty()) out.push_back(trim(cell));
  if (!out.empty() && out.front().empty()) out.erase(out.begin());  // before the leading '|'
  return out;
}

std::vector<std::string> table_op_names() {
  std::vector<std::string> names;
  dsv4kv::for_each_op([&](auto t) { names.emplace_back(decltype(t)::type::kName); });
  return names;
}

// The file stem of each DSV4KV_OPS entry (its short name), in table order.
std::vector<std::string> table_op_stems() {
  std::vector<std::string> stems;
  dsv4kv::for_each_op([&](auto t) { stems.emplace_back(dsv4kv::op_stem<typename decltype(t)::type>); });
  return stems;
}

TEST(ReadmeDoc, OperationTableListsExactlyTheOpTable) {
  const std::string readme = read_file("README.md");
  if (readme.empty()) GTEST_SKIP() << "README.md not readable under " << source_dir();
  std::string error;
  const auto rows = marked_lines(readme, "<!-- operations:begin -->", "<!-- operations:end -->", &error);
  ASSERT_TRUE(error.empty()) << "README.md: " << error;
  ASSERT_GE(rows.size(), 2u) << "README.md: the operation table has no header";
  ASSERT_EQ(cells(rows[0]).at(0), "operation") << "README.md: the operation table's first column is 'operation'";
  ASSERT_EQ(rows[1].rfind("|---", 0), 0u) << "README.md: the operation table's second line is its delimiter row";
  std::vector<std::string> names, short_names;
  for (size_t i = 2; i < rows.size(); ++i) {
    const auto c = cells(rows[i]);
    ASSERT_FALSE(c.empty()) << "README.md: an empty row in the operation table: " << rows[i];
    names.push_back(c[0]);
    short_names.push_back(c.size() > 1 ? c[1] : "");
  }
  const auto want = table_op_names();
  std::string listing;
  for (const auto& n : want) listing += "  " + n + "\n";
  EXPECT_EQ(names, want) << "README.md's operation table must list exactly the operations of DSV4KV_OPS "
                            "(spec/include/dsv4kv/spec/op_table.hpp), in this order:\n"
                         << listing;
  EXPECT_EQ(short_names, table_op_stems()) << "README.md's short names must be the DSV4KV_OPS stems, in table order";
}

// README.md is user documentation: at most 200 lines, none wider than 120 columns (UTF-8 code points),
// and the benchmark table in the one block the next run replaces.
TEST(ReadmeDoc, IsShortAndNarrow) {
  const std::string readme = read_file("README.md");
  if (readme.empty()) GTEST_SKIP() << "README.md not readable under " << source_dir();
  std::istringstream in(readme);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    int columns = 0;
    for (const unsigned char ch : line) columns += (ch & 0xC0) != 0x80 ? 1 : 0;  // count lead bytes only
    EXPECT_LE(columns, 120) << "README.md:" << n << " is " << columns << " columns wide: " << line;
  }
  EXPECT_LE(n, 200) << "README.md has " << n << " lines";
  std::string error;
  const auto bench = marked_lines(readme, "<!-- bench-table:begin -->", "<!-- bench-table:end -->", &error);
  EXPECT_TRUE(error.empty()) << "README.md: " << error;
  EXPECT_FALSE(bench.empty()) << "README.md: the benchmark block is empty";
}

}  // namespace
