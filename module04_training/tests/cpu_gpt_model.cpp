// CPU tests of the GPT trainer's host side (module04/gpt_model.hpp): the parameter layout
// and count, the initialization, the learning-rate schedule, the batch sampler's hash (its
// values are pinned: scripts/gpt_twin.py repeats them in Python), the token-file reader,
// the sampling of a token from logits, the --precision names, the --profile table and the
// checkpoint file (save, resume, refusals). No GPU needed.

#include "course/error.hpp"
#include "module04/gpt_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

namespace gpt = course::m04::gpt;

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

TEST(GptLayout, DefaultModelHasTheIssuesParameterCount) {
  const gpt::GptConfig c;  // 6 x 384, context 256, vocabulary 84
  const gpt::ParamLayout L(c);
  EXPECT_EQ(L.count, gpt::gpt_parameter_count(c));
  EXPECT_EQ(L.count, 10778112);  // 84*384 + 256*384 + 6*(12*384^2 + 13*384) + 2*384: "10.8 M"
  EXPECT_EQ(L.tensors.size(), 2u + 12u * 6u + 2u);
  EXPECT_EQ(L[L.wte].name, "wte");
  EXPECT_EQ(L[L.blocks[5].fcproj_w].name, "h5.mlp.proj.weight");
  EXPECT_EQ(L[L.lnf_b].name, "lnf.bias");
}

TEST(GptLayout, TensorsAreAlignedDisjointAndInOrder) {
  const gpt::GptConfig configs[] = {gpt::GptConfig{}, gpt::GptConfig{65, 17, 3, 2, 128, 5},
                                    gpt::GptConfig{2, 1, 1, 1, 64, 1}};
  for (const gpt::GptConfig& c : configs) {
    const gpt::ParamLayout L(c);
    EXPECT_EQ(L.count, gpt::gpt_parameter_count(c));
    std::int64_t end = 0, count = 0;
    for (const gpt::ParamTensor& t : L.tensors) {
      EXPECT_EQ(t.offset % gpt::kAlign, 0) << t.name;
      EXPECT_GE(t.offset, end) << t.name;
      std::int64_t numel = 1;
      for (const std::int64_t d : t.shape) numel *= d;
      EXPECT_EQ(numel, t.numel) << t.name;
      end = t.offset + t.numel;
      count += t.numel;
    }
    EXPECT_LE(end, L.total);
    EXPECT_EQ(count, L.count);
  }
}

TEST(GptLayout, DecayAndBf16CopiesFollowTheKinds) {
  const gpt::GptConfig c;
  const gpt::ParamLayout L(c);
  for (const gpt::ParamTensor& t : L.tensors) {
    const bool is_matrix = t.shape.size() == 2;
    EXPECT_EQ(t.decay(), is_matrix) << t.name;  // weight decay on matrices (and embeddings) only
    EXPECT_EQ(t.bf16_copy(), is_matrix && t.name != "wpe") << t.name;  // the GEMMs' operands, wte = the head
  }
}

TEST(GptConfig, RejectsWhatTheKernelsCannotTake) {
  gpt::GptConfig c;
  c.heads = 8;  // head_dim 48
  try {
    gpt::validate_config(c);
    FAIL() << "head_dim 48 accepted";
  } catch (const course::InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "head_dim")) << e.what();
  }
  c = gpt::GptConfig{};
  c.d_model = 385;
  EXPECT_THROW(gpt::validate_config(c), course::InvalidArgument);
  c = gpt::GptConfig{};
  EXPECT_NO_THROW(gpt::validate_config(c));
  EXPECT_EQ(c.vocab_padded(), 88);
}

TEST(GptConfig, PrecisionNames) {
  EXPECT_EQ(gpt::parse_precision("bf16"), gpt::GptPrecision::bf16);
  EXPECT_EQ(gpt::parse_precision("fp32"), gpt::GptPrecision::fp32);
  EXPECT_STREQ(gpt::precision_name(gpt::GptPrecision::fp32), "fp32");
  EXPECT_STREQ(gpt::precision_name(gpt::GptPrecision::bf16), "bf16");
  try {
    gpt::parse_precision("fp16");
    FAIL() << "fp16 accepted";
  } catch (const course::InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "--precision")) << e.what();
    EXPECT_TRUE(contains(e.what(), "fp16")) << e.what();
  }
}

TEST(GptProfile, PhasesKeepStepOrderAndAverageOverSteps) {
  gpt::PhaseProfile p;
  EXPECT_EQ(p.ms_per_step(), 0.0);
  for (int step = 0; step < 2; ++step) {
    p.add("embedding", 1.0);
    for (int layer = 0; layer < 3; ++layer) {  // phases repeated per layer are summed
      p.add("fwd.qkv", 2.0);
      p.add("fwd.attention", 1.0);
    }
    p.add("adamw", 3.0);
    p.end_step();
  }
  const std::vector<gpt::PhaseProfile::Row> rows = p.rows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].phase, "embedding");
  EXPECT_EQ(rows[1].phase, "fwd.qkv");
  EXPECT_EQ(rows[3].phase, "adamw");
  EXPECT_DOUBLE_EQ(rows[1].ms_per_step, 6.0);  // 3 layers x 2 ms, averaged over 2 steps
  EXPECT_DOUBLE_EQ(p.ms_per_step(), 1.0 + 6.0 + 3.0 + 3.0);
  double share = 0.0;
  for (const auto& r : rows) share += r.share;
  EXPECT_NEAR(share, 1.0, 1e-12);
  EXPECT_NEAR(rows[1].share, 6.0 / 13.0, 1e-12);
  const std::string csv = p.csv();
  EXPECT_EQ(csv.rfind("phase,ms_per_step,share\n", 0), 0u) << csv;
  EXPECT_TRUE(contains(csv, "fwd.qkv,6.000000,0.461538\n")) << csv;
}

TEST(GptInit, Gpt2Scheme) {
  const gpt::GptConfig c;
  const gpt::ParamLayout L(c);
  const std::vector<float> p = gpt::gpt_init_parameters(c, L, 1337);
  const auto stats = [&](int t) {
    const gpt::ParamTensor& T = L[t];
    double s = 0, s2 = 0;
    for (std::int64_t i = 0; i < T.numel; ++i) {
      const double v = p[static_cast<std::size_t>(T.offset + i)];
      s += v;
      s2 += v * v;
    }
    const double n = static_cast<double>(T.numel);
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  const auto [m_qkv, s_qkv] = stats(L.blocks[0].qkv_w);
  EXPECT_NEAR(m_qkv, 0.0, 2e-4);
  EXPECT_NEAR(s_qkv, 0.02, 2e-4);
  const auto [m_proj, s_proj] = stats(L.blocks[3].fcproj_w);
  EXPECT_NEAR(m_proj, 0.0, 1e-4);
  EXPECT_NEAR(s_proj, 0.02 / std::sqrt(12.0), 1e-4);
  EXPECT_EQ(p[static_cast<std::size_t>(L[L.blocks[0].ln1_g].offset)], 1.f);
  EXPECT_EQ(p[static_cast<std::size_t>(L[L.blocks[0].qkv_b].offset)], 0.f);
  EXPECT_EQ(p, gpt::gpt_init_parameters(c, L, 1337));  // seeded
  EXPECT_NE(p, gpt::gpt_init_parameters(c, L, 1338));
}

TEST(GptSchedule, WarmupThenCosineToMinLr) {
  const gpt::LrSchedule s{1e-3, 1e-4, 100, 2000};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-5);
  EXPECT_DOUBLE_EQ(s.at(99), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
  EXPECT_NEAR(s.at((100 + 1999) / 2), 5.5e-4, 1e-6);  // halfway down the cosine
  EXPECT_DOUBLE_EQ(s.at(1999), 1e-4);
  for (std::int64_t i = 101; i < 2000; ++i) EXPECT_LE(s.at(i), s.at(i - 1)) << i;
  const gpt::LrSchedule none{1e-3, 1e-4, 0, 10};
  EXPECT_DOUBLE_EQ(none.at(0), 1e-3);
}

TEST(GptBatches, SplitmixAndOffsetsArePinned) {
  // splitmix64's reference output for state 0 (Vigna): the twin's Python port checks the same.
  EXPECT_EQ(gpt::splitmix64(0), 0xE220A8397B1DCDAFull);
  const std::int64_t n = 4530000, T = 256;
  std::set<std::int64_t> seen;
  for (std::uint64_t b = 0; b < 64; ++b) {
    const std::int64_t o = gpt::gpt_batch_offset(1337, 0, 0, b, n, T);
    EXPECT_GE(o, 0);
    EXPECT_LT(o, n - T);
    EXPECT_EQ(o, gpt::gpt_batch_offset(1337, 0, 0, b, n, T));
    seen.insert(o);
  }
  EXPECT_GT(seen.size(), 60u);
  EXPECT_NE(gpt::gpt_batch_offset(1337, 0, 0, 0, n, T), gpt::gpt_batch_offset(1337, 1, 0, 0, n, T));
  EXPECT_NE(gpt::gpt_batch_offset(1337, 0, 0, 0, n, T), gpt::gpt_batch_offset(1337, 0, 1, 0, n, T));
  // The smallest file: one position only.
  EXPECT_EQ(gpt::gpt_batch_offset(7, 0, 3, 5, T + 1, T), 0);
}

TEST(GptSampling, TemperatureAndInverseCdf) {
  const std::vector<float> logits{0.f, 2.f, 1.f, 2.f};
  EXPECT_EQ(gpt::sample_token(logits, 0.0, 0.99), 1);  // greedy: the lowest id on ties
  EXPECT_EQ(gpt::sample_token(logits, 1.0, 0.0), 0);
  // Frequencies over a fine grid of u follow softmax(logits / temperature).
  for (const double temp : {0.5, 1.0, 2.0}) {
    std::vector<double> p(4), count(4, 0.0);
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += p[j] = std::exp(logits[j] / temp);
    const int K = 100000;
    for (int i = 0; i < K; ++i) count[static_cast<std::size_t>(gpt::sample_token(logits, temp, (i + 0.5) / K))] += 1;
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(count[j] / K, p[j] / sum, 1e-4) << "temperature " << temp << " id " << j;
  }
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const double u = gpt::gpt_uniform(5, i);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(GptData, ReadsTokenAndVocabFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "cpu_gpt_model_test";
  std::filesystem::create_directories(dir);
  const auto write_tokens = [&](const std::string& name, const char* magic, std::uint32_t token_bytes,
                                const std::vector<std::uint8_t>& body, std::uint64_t n) {
    std::ofstream f(dir / name, std::ios::binary);
    const std::uint32_t version = 1, vocab = 300, reserved = 0;
    f.write(magic, 8);
    f.write(reinterpret_cast<const char*>(&version), 4);
    f.write(reinterpret_cast<const char*>(&vocab), 4);
    f.write(reinterpret_cast<const char*>(&token_bytes), 4);
    f.write(reinterpret_cast<const char*>(&reserved), 4);
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
  };
  write_tokens("u16.bin", "CRSTOKEN", 2, {1, 0, 0x2b, 0x01, 7, 0}, 3);
  const gpt::TokenFile t = gpt::read_token_file((dir / "u16.bin").string());
  EXPECT_EQ(t.num_tokens(), 3);
  EXPECT_EQ(t.vocab_size, 300u);
  EXPECT_EQ(t.at(0), 1);
  EXPECT_EQ(t.at(1), 299);
  EXPECT_EQ(t.at(2), 7);
  write_tokens("short.bin", "CRSTOKEN", 1, {1, 2}, 3);
  EXPECT_THROW(gpt::read_token_file((dir / "short.bin").string()), course::Error);
  write_tokens("magic.bin", "CRSVOCAB", 1, {1, 2, 3}, 3);
  EXPECT_THROW(gpt::read_token_file((dir / "magic.bin").string()), course::Error);
  try {
    gpt::read_token_file((dir / "absent.bin").string());
    FAIL() << "a missing file was read";
  } catch (const course::Error& e) {
    EXPECT_TRUE(contains(e.what(), "python3 scripts/gpt_data.py prepare")) << e.what();
  }
  {
    std::ofstream f(dir / "vocab.bin", std::ios::binary);
    char header[32] = "CRSVOCAB";
    const std::uint32_t version = 1, vocab = 2;
    std::memcpy(header + 8, &version, 4);
    std::memcpy(header + 12, &vocab, 4);
    f.write(header, 32);
    f.write("\x01\n\x02\xc3\xa9", 5);  // "\n", then U+00E9 in two UTF-8 bytes
  }
  const std::vector<std::string> v = gpt::read_vocab_file((dir / "vocab.bin").string());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "\n");
  EXPECT_EQ(v[1], "\xc3\xa9");
  std::filesystem::remove_all(dir);
}

/// save -> resume: a checkpoint written for one configuration reads back bit for bit (the
/// parameters, AdamW's moments and the step, padding zero), and a checkpoint of another
/// model size, another file kind or a cut-off file is refused, naming what is wrong.
TEST(GptFiles, CheckpointRoundTripAndRefusals) {
  const auto dir = std::filesystem::temp_directory_path() / "cpu_gpt_checkpoint_test";
  std::filesystem::create_directories(dir);
  const gpt::GptConfig c{65, 17, 2, 2, 128, 3};
  const gpt::ParamLayout L(c);
  gpt::GptCheckpoint ck;
  ck.step = 1234;
  ck.params = gpt::gpt_init_parameters(c, L, 7);
  ck.m = gpt::gpt_init_parameters(c, L, 8);
  ck.v = gpt::gpt_init_parameters(c, L, 9);
  for (float& x : ck.v) x = x * x;  // second moments are >= 0
  const std::string path = (dir / "ck.bin").string();
  gpt::write_gpt_checkpoint(path, c, L, ck);
  EXPECT_EQ(static_cast<std::int64_t>(std::filesystem::file_size(path)), 64 + 3 * 4 * L.count);
  const gpt::GptCheckpoint back = gpt::read_gpt_checkpoint(path, c, L);
  EXPECT_EQ(back.step, 1234);
  ASSERT_EQ(back.params.size(), ck.params.size());
  EXPECT_EQ(std::memcmp(back.params.data(), ck.params.data(), 4 * ck.params.size()), 0);
  EXPECT_EQ(std::memcmp(back.m.data(), ck.m.data(), 4 * ck.m.size()), 0);
  EXPECT_EQ(std::memcmp(back.v.data(), ck.v.data(), 4 * ck.v.size()), 0);

  gpt::GptConfig other = c;
  other.layers = 3;
  try {
    gpt::read_gpt_checkpoint(path, other, gpt::ParamLayout(other));
    FAIL() << "a checkpoint of another model size was read";
  } catch (const course::Error& e) {
    EXPECT_TRUE(contains(e.what(), "layers = 2, this run 3")) << e.what();
  }
  {
    std::ofstream f((dir / "init.bin").string(), std::ios::binary);
    gpt::write_gpt_header(f, "CRSGPTIN", c, 0);
    gpt::write_gpt_tensors(f, L, ck.params);
  }
  try {
    gpt::read_gpt_checkpoint((dir / "init.bin").string(), c, L);
    FAIL() << "a --dump-init file was read as a checkpoint";
  } catch (const course::Error& e) {
    EXPECT_TRUE(contains(e.what(), "not a version-1 m04_gpt checkpoint")) << e.what();
  }
  std::filesystem::resize_file(path, 64 + 2 * 4 * L.count);
  try {
    gpt::read_gpt_checkpoint(path, c, L);
    FAIL() << "a truncated checkpoint was read";
  } catch (const course::Error& e) {
    EXPECT_TRUE(contains(e.what(), "truncated")) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
