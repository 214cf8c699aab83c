// Appended to the DeltaNet kernel files on the CPU emulation (cuda-shim.h; test/kernels/deltanet-emulated.test.ts): one
// step of the gated delta rule over prompts (from position 0 and continuing, several chunks, a partial last one), a
// decode row and a short chunk, each on its own state slot, through each build: deltanet_recurrent (the reference the
// GPU tests tie to the CPU backend); deltanet_recurrent_wide (must give its bits); deltanet_chunked in chunks of 64
// and of 32 (within rounding); a mixed step launched as the engine launches it (wide for one token, recurrent below
// 64, chunked from 64); deltanet_chunked's tensor-core build (within rounding; cuda-shim.h's MMA and
// ldmatrix by their documented fragments); deltanet_recurrent_mixed (wide and recurrent in one launch: their bits),
// alone and beside chunked. Prints a line a check, "FAIL" or "ok" last; exits 1 on a failure.
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>

namespace harness {
int failures = 0;

void bits(const char* what, const std::vector<float>& x, const std::vector<float>& ref) {
  int differ = 0;
  for (size_t i = 0; i < x.size(); i++) differ += std::memcmp(&x[i], &ref[i], 4) != 0;
  std::printf("%s: %d of %zu bits differ\n", what, differ, x.size());
  failures += differ > 0;
}

void close(const char* what, const std::vector<float>& x, const std::vector<float>& ref) {
  double rms = 0, worst = 0;
  for (float v : ref) rms += (double)v * v;
  rms = std::sqrt(rms / ref.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double e = std::fabs((double)x[i] - ref[i]) / (rms + std::fabs(ref[i]));
    worst = e <= 1e30 ? std::max(worst, e) : 1e30;  // NaN (never written) counts as the worst
  }
  std::printf("%s: worst relative error %.3g\n", what, worst);
  failures += !(worst < 1e-4);
}

template <int DK>
void run(int Hk, int Hv, int Dv) {
  std::mt19937 rng(DK * 31 + Dv);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::vector<int> lens = {130, 1, 70, 3}, starts = {0, 5, 10, 7};
  const int S = (int)lens.size();
  std::vector<int> qsl(S + 1, 0), seqLens(S), slots(S);
  for (int s = 0; s < S; s++) {
    qsl[s + 1] = qsl[s] + lens[s];
    seqLens[s] = starts[s] + lens[s];
    slots[s] = S - 1 - s;
  }
  const int T = qsl[S], C = 2 * Hk * DK + Hv * Dv, slotFloats = Hv * DK * Dv;
  std::vector<float> conv(T * C), ba(T * 2 * Hv), aLog(Hv), dtBias(Hv), state(S * slotFloats);
  // bf16 values, as the device's activations are (the tensor-core build takes q and k as they come, exactly)
  for (float& v : conv) v = to_float(from_float<bf16_t>(2 * u(rng)));
  for (float& v : ba) v = 3 * u(rng);
  for (float& v : aLog) v = u(rng);
  for (float& v : dtBias) v = u(rng);
  for (float& v : state) v = 0.3f * u(rng);
  const int colsPerWarp = 32 / (DK / 32), groups = (Dv + colsPerWarp - 1) / colsPerWarp, colBlocks = (Dv + 31) / 32;
  const Dim3 perWarp{S, Hv, groups}, perCols{S, Hv, colBlocks};
  struct Out {
    std::vector<float> y, st;
  };
  auto fresh = [&] { return Out{std::vector<float>(T * Hv * Dv, NAN), state}; };
  auto recurrent = [&](Out& o, int skipUpTo, int skipFrom) {
    emu::launch(perWarp, 32, [&] {
      static float qks[2 * DK];
      deltanet_recurrent<float, float, DK, false>(conv.data(), ba.data(), 2 * Hv, aLog.data(), dtBias.data(),
        o.y.data(), o.st.data(), qsl.data(), seqLens.data(), slots.data(), Hk, Hv, Dv, slotFloats, 0, blockIdx.z, qks,
        qks + DK, skipUpTo, skipFrom);
    });
  };
  auto wide = [&](Out& o, int maxTokens) {
    emu::launch(perCols, DK, [&] {
      deltanet_recurrent_wide<float, float, DK>(conv.data(), ba.data(), 2 * Hv, aLog.data(), dtBias.data(),
        o.y.data(), o.st.data(), qsl.data(), seqLens.data(), slots.data(), Hk, Hv, Dv, slotFloats, 0, maxTokens);
    });
  };
  // chunks of 32 or 64 tokens, on CUDA cores or (mma) the tensor-core build's
  auto chunkedAs = [&](auto chunk, auto mma, Out& o, int minTokens) {
    emu::launch(perCols, DELTANET_CHUNK_THREADS, [&] {
      deltanet_chunked<float, float, DK, decltype(chunk)::value, decltype(mma)::value>(conv.data(), ba.data(), 2 * Hv,
        aLog.data(), dtBias.data(), o.y.data(), o.st.data(), qsl.data(), seqLens.data(), slots.data(), Hk, Hv, Dv,
        slotFloats, 0, minTokens);
    });
  };
  auto chunked = [&](Out& o, int minTokens, int chunkTokens, bool mma = false) {
    using std::integral_constant;
    if (chunkTokens == 32 && mma) chunkedAs(integral_constant<int, 32>(), std::true_type(), o, minTokens);
    if (chunkTokens == 32 && !mma) chunkedAs(integral_constant<int, 32>(), std::false_type(), o, minTokens);
    if (chunkTokens == 64 && mma) chunkedAs(integral_constant<int, 64>(), std::true_type(), o, minTokens);
    if (chunkTokens == 64 && !mma) chunkedAs(integral_constant<int, 64>(), std::false_type(), o, minTokens);
  };
  auto oneLaunch = [&](Out& o, int maxTokens, int skipFrom) {
    emu::launch(perCols, DK, [&] {
      deltanet_recurrent_mixed<float, float, DK>(conv.data(), ba.data(), 2 * Hv, aLog.data(), dtBias.data(),
        o.y.data(), o.st.data(), qsl.data(), seqLens.data(), slots.data(), Hk, Hv, Dv, slotFloats, 0, maxTokens,
        skipFrom);
    });
  };
  Out ref = fresh(), wideAll = fresh(), chunk = fresh(), chunk32 = fresh(), mixed = fresh();
  Out one = fresh(), oneChunked = fresh(), mma = fresh(), mma32 = fresh();
  recurrent(ref, 0, 0x7fffffff);
  wide(wideAll, 1 << 30);
  chunked(chunk, 1, 64);
  chunked(chunk32, 1, 32);
  chunked(mma, 1, 64, true);
  chunked(mma32, 1, 32, true);
  wide(mixed, 1);
  recurrent(mixed, 1, 64);
  chunked(mixed, 64, 64);
  oneLaunch(one, 1, 0x7fffffff);
  oneLaunch(oneChunked, 1, 64);
  chunked(oneChunked, 64, 64);
  auto shortRows = [&](const std::vector<float>& y) {
    std::vector<float> rows;
    for (int s = 0; s < S; s++) {
      if (lens[s] < 64) rows.insert(rows.end(), y.begin() + qsl[s] * Hv * Dv, y.begin() + qsl[s + 1] * Hv * Dv);
    }
    return rows;
  };
  std::printf("Dk %d, %d key heads, %d value heads, Dv %d\n", DK, Hk, Hv, Dv);
  // a build's outputs and states: the recurrence's bits, or within rounding of them
  auto sameBits = [&](const char* what, const Out& o) {
    bits((std::string(what) + ", outputs").c_str(), o.y, ref.y);
    bits((std::string(what) + ", states").c_str(), o.st, ref.st);
  };
  auto near = [&](const char* what, const Out& o) {
    close((std::string(what) + ", outputs").c_str(), o.y, ref.y);
    close((std::string(what) + ", states").c_str(), o.st, ref.st);
  };
  sameBits("wide", wideAll);
  near("chunked", chunk);
  near("chunked in chunks of 32", chunk32);
  near("chunked on tensor cores", mma);
  near("chunked on tensor cores in chunks of 32", mma32);
  bits("mixed step, the outputs of sequences under 64 tokens", shortRows(mixed.y), shortRows(ref.y));
  near("mixed step", mixed);
  sameBits("one launch", one);
  bits("one launch beside chunked, the outputs of sequences under 64 tokens", shortRows(oneChunked.y),
       shortRows(ref.y));
  near("one launch beside chunked", oneChunked);
}
}  // namespace harness

int main() {
  harness::run<32>(1, 2, 8);
  harness::run<64>(2, 4, 40);
  harness::run<128>(1, 2, 32);
  std::printf(harness::failures ? "FAIL\n" : "ok\n");
  return harness::failures ? 1 : 0;
}
