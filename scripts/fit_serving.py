#!/usr/bin/env python3
"""Fit the serving-level corrections of the step-time model and the API-server front end on real
public `vllm bench serve` results, and report the error on the results held out.

    python scripts/fit_serving.py [--check] [--report FILE]

Reads tests/fixtures/bench_public/results.jsonl (each row: model, GPU, TP, quantization, eager,
lengths, concurrency/rate and the measured output throughput, mean TTFT and mean TPOT, with its
source URL; the ``split`` column was fixed before any fitting). Simulates each row with kvdoctor's
simulator (vLLM 0.33 scheduler + the kernel-fitted roofline) and fits, on the ``fit`` rows only,
a handful of named constants by minimising the sum of squared log errors:

  compute_scale[a100|h100]  served compute efficiency per GPU generation (prefill, TTFT)
  overhead_scale            the served V1 engine's sampler/input-preparation cost relative to Vidur's v0 profiles
  graph_layer_ms            per-layer gaps with CUDA graphs (collective launches, graph replay)
  eager_layer_ms            the same without graphs (--enforce-eager): Python kernel launches per layer
  int4_mem_eff              bandwidth efficiency of 4-bit (AWQ/GPTQ Marlin) weight GEMMs
  moe_layer_ms              fused-MoE fixed cost per MoE layer (routing, top-k, permutation, launch)
  frontend per_request_s    API server: admission, tokenisation, first-token streaming

Protocol of the warm-cache refit (fixed and committed before the fit was run; docs/simulation.md):

  1. Evaluation: every row as the sweeps ran, on a warm prefix cache (``bench_test_request``,
     ``prior_runs_same_server``, limited to what the row's KV pool holds: sim.workload.cached_heads).
  2. Fit on the ``fit`` rows only. Loss: least_squares on the log errors of the three figures,
     bounded by PARAMS (int4_mem_eff >= 0.6: Marlin), started from the committed constants, run to
     convergence (ftol = xtol = 1e-4; max_nfev 100 residual evaluations besides the Jacobian's; the
     log says if a fit stops on that cap instead).
  3. Candidates (the only choices): C1 all PARAMS free, soft_l1 with f_scale 0.2 (the loss used so
     far); C2 the same with f_scale 0.5; C3 the same with f_scale 0.1. No new free terms.
  4. Choice by leave-one-group-out cross-validation within the fit rows (group = the row's ``group``
     field, one source/deployment sweep): for each group, fit on the other fit rows, predict that
     group's rows. CV score = the mean over output throughput, mean TTFT and mean TPOT of the median
     absolute error of those predictions over the 19 fit rows. The candidate with the lowest CV score
     is chosen; held-out rows play no part in the choice.
  5. Adoption: refit the chosen candidate on all fit rows. Adopt it if its CV score is lower than the
     committed constants' score on the same 19 fit rows under the same warm evaluation (in-sample for
     the committed constants, so the comparison favours them). The held-out rows are then evaluated
     once with whichever constants result, and reported whatever the figure is.
  6. Rows' assumptions (GPU variant, versions, splits) are not changed after seeing errors; rows
     added later (batch 3) are held out and never enter the fit.

  Outcome (docs/simulation.md, "Refit under the warm evaluation"): C3 chosen (CV 32.0 %; C1 32.2 %,
  C2 32.8 %), not adopted (committed constants 16.3 % in-sample). ``--cv ... --candidates R0`` runs a
  reference that is not a candidate: the committed constants' own procedure (fit cold), scored warm.

    python scripts/fit_serving.py --cv FILE --candidates C1,C2,C3   # protocol 2's step 4 (JSON to FILE)

Protocol 3, "engine CPU" (fixed and committed before any of its fits ran; docs/simulation.md, "Refit with the
engine's CPU work"):

  1. New mechanism, no new data: ``engine_cpu_per_req_ms``, the V1 engine core's Python work per running request
     per step (sim/steptime.py: added to the GPU step without async scheduling, max(GPU, CPU) with it), and the
     API server's per-output-token work ``frontend.per_output_token_s`` (sim/frontend.py). Both 0 in the prior.
     Evaluation as protocol 2 (warm, pool-limited).
  2. Fit on the 28 ``fit`` rows only (batches 1, 2 and 5). Candidates (the only choices), each soft_l1 with
     f_scale 0.1 (protocol 2's chosen scale), from the committed constants, to convergence as protocol 2:
       K  the committed constants, no fit;
       A  K with the two new terms free, everything else fixed;
       B  A plus compute_scale.a100, compute_scale.h100 and frontend.per_request_s free;
       C  every PARAMS term free (protocol 2's ten and the two new ones).
  3. Choice by leave-one-source-out CV within the fit rows: group = the row's source page (``source_group``:
     a GitHub issue, or a file path without its commit; 8 groups). For each group, fit on the other fit rows and
     predict that group's rows. Score = the mean over output throughput, mean TTFT and mean TPOT of the median
     absolute error over the 28 fit rows. K is scored the same way with no fitting: its out-of-group predictions
     are its predictions, in-sample for the 19 fit rows of batches 1-2 it was fitted on. Held-out rows play no
     part. If C's CV cannot finish by 22:35 UTC on the day it ran, C is dropped and the record says so.
  4. Adoption: the best-scoring of A, B, C (refitted on all 28 fit rows) is adopted if its score is lower than
     K's; otherwise nothing is adopted. Then the 59 held-out rows are evaluated once, with whatever constants
     result, and reported per batch (1-2, 3, 4, 5, all) whatever they show.
  5. No row, split or assumption changes after seeing errors.
  Amendment (before any result was read): the first CV launch stopped every A fold after 2 evaluations without
  moving (started 1e-6 of the range above 0, trf's trust region starts as wide as the start); terms on a bound
  now start 1 % of their range inside (``start_margin``). That launch was killed and its folds discarded.

  Outcome (docs/simulation.md, "Refit with the engine's CPU work"): CV A 21.2 %, B 20.2 %, C 28.6 %, K 22.3 %;
  B chosen by the rule (compute_scale 0.45 / 0.54, per_request_s 11.4 ms, engine_cpu_per_req_ms 0.198,
  per_output_token_s ~0). Held out once, all 59: 10.7 / 32.7 / 8.9 % -> 20.1 / 42.2 / 13.9 % (worse; batch 3-4's
  single-A100 loaded runs too slow). NOT SHIPPED: the integrator overrode the rule on that evidence (the rule's
  yardstick scored K in-sample; no fit source is a saturated single-GPU run); the committed constants are K's
  (docs/simulation.md states the override and its price).

    python scripts/fit_serving.py --cv FILE --candidates A,B,C --procs 2   # protocol 3's step 3
    python scripts/fit_serving.py --candidate A --out FILE [--adopt]       # step 4 (writes only with --adopt)

Protocol 4, "fit on everything seen, test on a batch never seen" (fixed and committed before batch 6's rows were
simulated and before P4's fit ran; docs/simulation.md, "Protocol 4"):

  1. Why. Every row of batches 1-5 has been evaluated, and choices were made after seeing them (protocol 3's
     override); none of them is blind any more. The held-out set that still tests the model is one it has never
     met: batch 6, public results collected in the session of 2026-12-02 from sources not used before (a stock
     vLLM server; GPU, GPU count, model and workload stated by the source; the bench's printed figures),
     committed as fixture rows (``"batch": 6``, ``"split": "held_out"``) before kvdoctor is run on any of them.
  2. Candidates (the only two): K, the committed constants; P4, five terms free: compute_scale.a100,
     compute_scale.h100, attn_prefill_scale, graph_layer_ms, frontend.per_request_s; every other term at its
     committed value (engine_cpu_per_req_ms and frontend.per_output_token_s stay 0: protocol 3 showed one
     per-request engine term cannot serve a TP8 engine and a single-GPU one). Chosen by mechanism before any
     fit: prefill speed per GPU generation (the TTFT of loaded runs, the largest held-out miss), the per-layer
     step gap (TPOT), the front end per request (TTFT at low load). Protocol 3's all-terms candidate C
     over-fitted in its CV.
  3. P4 is fitted on ALL rows of batches 1-5 (87: fit and held-out alike), soft_l1 with f_scale 0.1, from the
     committed constants, to convergence, with the restart check (100x tighter tolerances).
  4. Evaluation, once: batch 6 with K and with P4. Score = the mean over output throughput, mean TTFT and mean
     TPOT of the median |error| over batch 6. P4 is adopted if its score is lower than K's, else K stays. Both
     are reported whatever they show, with batches 1-5 (in-sample for P4).
  5. No batch-6 row, assumption or split changes after its errors are seen. A result whose model or GPU the
     catalog lacks is listed as left out in the fixture README, not evaluated.

  Amendment (before any batch-6 figure was computed): the catalog's RTX 5090 has no sourced dense tensor rate, so the
  simulator refuses its 7 rows (pegainfer); they are left out (fixture README). 30 rows from 4 sources remain.
  Outcome (docs/simulation.md, "Protocol 4"): P4 = compute_scale 0.753 / 0.450, attn_prefill_scale 2.08,
  graph_layer_ms 0.0642, per_request_s 16.5 ms (tests/fixtures/bench_public/protocol4/p4_fit.json). Batch 6, once:
  K 4.1 / 20.6 / 6.8 % (score 10.5 %), P4 18.2 / 67.2 / 16.9 % (34.1 %): K stays; nothing written.

    python scripts/fit_serving.py --candidate P4 --out FILE --fit-only   # step 3 (batch 6 not simulated)
    python scripts/fit_serving.py --from-fit FILE --out FILE2            # step 4: every row, P4's constants

Protocol 5, "a second blind batch" (fixed and committed at 14:07 UTC on 2026-12-02, before batch 7 was collected,
before any of its rows was read by the integrator and before kvdoctor was run on any of them; docs/simulation.md,
"Protocol 5"):

  1. Why. Batch 6 is the only blind test of the uncalibrated model, and its 24 TTFTs missed the 20 % bar by 0.6
     points: a median of 24 rows is uncertain by several points either way, so one batch cannot say on which side of
     the bar the model lies. Disclosed: this second chance was decided after batch 6's miss was known.
  2. No candidate, no fit: K, the committed constants, unchanged. (Protocol 3's fit gave the per-output-token front
     end ~0 and protocol 4's refit lost to K; no term is changed on evidence already seen.)
  3. Batch 7: public results collected on 2026-12-02 by transcribers who do not run kvdoctor, under batch 6's six
     rules (fixture README), from sources not in batches 1-6 (a source already used only for a deployment, i.e. a
     GPU and model, it did not have). Rows are committed (``"batch": 7``, ``"split": "held_out"``) before any of
     their figures is computed. A row the simulator refuses (a GPU or model it cannot price) is listed as left out
     with the reason, as batch 6's amendment did; no other row is dropped after its figures are seen.
  4. Evaluation, once, with K: batch 7 alone, and the blind pool (batches 6 and 7: every row first evaluated after it
     was committed, with constants fixed before it was collected). The bar (median |error| at most 15 % throughput,
     20 % TTFT, 20 % TPOT) is judged on the blind pool; batch 7 alone and all held-out rows (batches 1-7, most of
     them seen) are reported beside it, whatever they show.
  5. No batch-7 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 5"): batch 7 = 124 rows from 2 sources (3754e5b). Once, with K: batch 7
  7.2 / 19.2 / 13.6 %; blind pool (154 rows; 38 TTFTs) 7.05 / 19.98 / 10.66 %, the bar met, TTFT by 0.02 points
  (bootstrap 90 % interval 17.9-30.8 %); every held-out row 8.4 / 28.5 / 9.1 %. Nothing written.

    python scripts/fit_serving.py --check    # prints held_out_batch7 and blind_batches6_7 with the rest

Protocol 6, "a physical ceiling on served GEMMs" (fixed and committed on 2026-12-02 before the candidate was implemented
or evaluated on any row; docs/simulation.md, "Protocol 6"):

  1. Why. K's ``compute_scale`` multiplies the kernel fit's compute efficiency: the compute-bound GEMM rate it gives an
     H100-family part is 0.736 x 1.401 = 103 % of the 989 TFLOPS datasheet peak (1,020 TFLOPS), a generic part 91 %,
     an MI300X 1,180 TFLOPS. No served GEMM beats the Maximum Achievable Matmul FLOPS (MAMF) of a brute-force shape
     search on the part. The scale was fitted cold on rows that ran on a warm prefix cache (the section "The sweeps ran
     on a warm prefix cache"), which asks for a too-fast prefill. Disclosed: the blind pool's light-load TTFT shortfall
     (recorded under protocol 5) is what prompted the question, so this evaluation is not blind.
  2. Candidate K6 (no fit; one mechanism, nothing else changes): the compute-bound GEMM rate ``peak x compute_scale x
     eta_c`` is capped at the part's MAMF. Source: S. Bekman, "Machine Learning Engineering", compute/accelerator,
     "Maximum Achievable Matmul FLOPS comparison table" (v2; torch 2.5-2.7): BF16 A100 SXM 271.2, A100 PCIe 252.9,
     H100 SXM 794.5, GH200 828.6, MI325X 784.9, MI300X 668.4 TFLOPS; MI250X one GCD 147.0 (its v1 table); FP8 H100 SXM
     1,402.6, GH200 1,535.0. A part not in the table is capped at 80.3 % of its datasheet BF16 peak (H100 SXM's
     efficiency, the lowest NVIDIA entry) and 70.9 % of its FP8 peak (H100 SXM's). Where K's rate is already below the
     cap (the A100s), nothing changes. Attention, memory-bound terms and every fitted constant stay as committed.
  3. Evaluation, once: every row with K and with K6. Adoption: K6 replaces K if its score on the blind pool (batches
     6-7; the mean over output throughput, mean TTFT and mean TPOT of the median |error|) is lower than K's and it meets
     all three bars there; otherwise K stays. Batches 1-5, every held-out row and the calibrated public series are
     reported beside it, whatever they show.
  4. No row, split or assumption changes.

  Outcome (docs/simulation.md, "Protocol 6"): K6 blind pool 5.93 / 19.37 / 10.66 % against K's 7.05 / 19.98 / 10.66 %
  (score 11.99 < 12.56 %, bars met): adopted (995071d). It broke calibrated batch 4 (9.8 / 6.5 / 8.8 -> 21.5 / 16.8 /
  8.8 %: GEMMs capped, attention not, so a 2000-token anchor scaled a 32000-token run too fast). Amended after those
  results, disclosed as post hoc: the excess compute_scale is taken out of attention by the same factor (U, shipped):
  blind pool 6.33 / 19.33 / 10.66 % (12.11 %), every held-out row 7.55 / 24.65 / 9.47 %, calibrated batch 4 7.8 / 6.5
  / 8.8 %. steptime.GEMM_CEILING switches it; ``serving={"gemm_ceiling": False}`` evaluates K.

  5. (Stated on 2026-12-02 at 22:15 UTC, after U and before this was evaluated on any row.) The invariant of item 2 is
     broken on one path: ``moe_factor`` (0.53, fitted) multiplies the fused-MoE experts' whole roofline, so their
     compute-bound time runs at 1/0.53 of the capped GEMM rate (an H100 at ~1,500 TFLOPS). Candidate U+M: U with the
     experts' time floored at their compute time at the capped rate (``max(moe_factor x softmax(m, f), f)``; decode,
     memory-bound, is unchanged). Adopted if, against U, the blind pool's score is not higher and the median |TTFT
     error| over every held-out row is not higher; otherwise U stays. The MoE rows (every batch) are reported either way.
  Outcome of item 5: blind pool unchanged (6.33 / 19.33 / 10.66 %), every held-out row TTFT 24.65 -> 24.22 %: adopted
  (steptime.MOE_COMPUTE_FLOOR). SERVING_FIT's medians re-measured with the ceiling (held-out 59 rows of batches 1-5
  unchanged at 10.7 / 32.7 / 8.9 %).

  6. (Stated on 2026-12-03 at 02:50 UTC, before it was evaluated on any row.) The same invariant on the memory side:
     ``moe_factor`` also divides the experts' read time, so the touched experts are read at 1/0.53 of the rate the
     dense GEMMs' memory term allows (above the part's datasheet bandwidth). At one token (decode, concurrency 1) the
     touched experts are exactly top-k, so skewed routing cannot explain it; in prefill every expert is touched and
     read at least once. Candidate U+M+R: U+M with the experts' time also floored at their read time
     (``max(moe_factor x softmax(m, f), m, f)``, m the touched experts' bytes at the dense GEMMs' memory rate). No
     fit; moe_factor then acts only where reads and compute overlap. Adopted if, against U+M, the blind pool's score
     is not higher and the median |TTFT error| over every held-out row is not higher; otherwise U+M stays. The MoE
     rows (every batch) and their TPOT are reported either way. ``serving={"moe_read_floor": True}`` evaluates U+M+R.
  Outcome of item 6: blind pool 6.33 / 19.33 / 10.66 -> 6.38 / 19.72 / 11.55 % (score 12.11 -> 12.55 %), every held-out
  row 7.55 / 24.22 / 9.47 -> 7.64 / 23.60 / 10.88 %: the blind pool's score rose, not adopted (steptime.MOE_READ_FLOOR
  stays False). MoE prefill TTFT moved the right way (Qwen3-30B-A3B A100 c1 -33 -> -17 %), decode TPOT the wrong way
  (+11 -> +20 %; H100 at 4 req/s +6 -> +69 %): moe_factor absorbs an excess elsewhere in MoE decode.

Protocol 7, "a third blind batch" (fixed and committed on 2026-12-03 at 09:05 UTC, before batch 8 was collected and
before any of its rows existed; docs/simulation.md, "Protocol 7"):

  1. Why. The blind pool's TTFT median (19.33 % under the shipped constants, 38 TTFTs) meets the 20 % bar by 0.7
     points with a bootstrap interval of 14.3-25.7 %: more blind TTFTs are what can settle the verdict either way.
  2. No candidate, no fit: the shipped constants (U+M, protocol 6) are judged unchanged.
  3. Batch 8: public results collected on 2026-12-03 by transcribers who do not run kvdoctor, under batch 6's six rules
     (fixture README), from sources not in batches 1-7 nor among the sources batch 7's transcribers left out (a source
     already used counts only for a GPU and model it did not have). Rows are committed (``"batch": 8``,
     ``"split": "held_out"``) before any of their figures is computed. A row the simulator refuses is listed as left
     out with its reason; no other row is dropped after its figures are seen.
  4. Evaluation, once: batch 8 alone, and the blind pool (batches 6-8). The bar is judged on the blind pool; batch 8
     alone and every held-out row (batches 1-8) are reported beside it, whatever they show. If batch 8 holds no row,
     that is reported and the verdict stays protocol 6's.
  5. No batch-8 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 7"): batch 8 = 12 rows from 2 sources (5054200; 22 more transcribed rows left
  out under rule 1 before any figure, no vLLM release stated). Once, with the shipped constants: batch 8 6.9 / 13.0 /
  2.2 %; blind pool (batches 6-8, 166 rows; 50 TTFTs) 6.33 / 16.48 / 7.04 %, the bar met (bootstrap 90 % interval of the
  TTFT median 13.4-23.2 %); every held-out row (225) 7.5 / 23.3 / 8.5 %. Nothing written.

    python scripts/fit_serving.py --check    # prints held_out_batch8 and blind_batches6_8 with the rest

Protocol 9, "a fourth blind batch" (fixed and committed on 2026-12-03 at 17:15 UTC, before batch 9 was collected and
before any of its rows existed; docs/simulation.md, "Protocol 9"):

  1. Why. The blind pool meets the TTFT bar at 16.48 % but its bootstrap interval (13.4-23.2 %) still reaches past 20 %,
     and protocol 8 found nothing that moves it: more blind TTFTs are what can narrow it, either way.
  2. No candidate, no fit: the shipped constants are judged unchanged.
  3. Batch 9: public results collected on 2026-12-03 by transcribers who do not run kvdoctor, under batch 6's six rules
     (fixture README), from sources not in batches 1-8 (a source already used counts only for a GPU and model it did not
     have). Rows are committed (``"batch": 9``, ``"split": "held_out"``) before any of their figures is computed. A row
     the simulator refuses is listed as left out with its reason; no other row is dropped after its figures are seen.
  4. Evaluation, once: batch 9 alone, and the blind pool (batches 6-9). The bar is judged on the blind pool; batch 9
     alone and every held-out row (batches 1-9) are reported beside it, whatever they show. If batch 9 holds no row,
     that is reported and the verdict stays protocol 7's.
  5. No batch-9 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 9"): batch 9 = 12 rows from 1 source (GPUStack's docs; 10 transcribed rows
  left out before any figure: batch 5/6 pairs, derived input lengths, and, by two amendments made when the evaluation
  stopped on them, an AWQ row given a quantization the simulator refuses and two RTX 4090 rows the simulator cannot run).
  The H100 32K row completes no request as stated (no prediction; the evaluation now counts a figure only when the
  simulation produced it). Once, with the shipped constants: batch 9 21.7 / 28.3 / 46.6 %; blind pool (batches 6-9,
  178 rows) 6.38 / 19.51 / 9.29 %, the bar met; every held-out row (237) 7.6 / 23.5 / 9.2 %. UNCERTAINTY_BANDS
  rewritten with batch 9 (--bands). Nothing else written.

Protocol 10, "a fifth blind batch, from vLLM's own threads" (fixed and committed on 2026-12-03 at 20:25 UTC, before
batch 10 was collected and before any of its rows existed; docs/simulation.md, "Protocol 10"):

  1. Why. The blind pool meets the TTFT bar by 0.5 points (bootstrap 15.5-25.5 %); the verdict is a coin toss, and
     only more blind TTFTs can settle it, either way. Batches 6-9 came from repositories and pages; vLLM's own pull
     requests and issues, where contributors paste `vllm bench serve` blocks, gave 4 rows in all (batches 2 and 6).
  2. No candidate, no fit: the shipped constants are judged unchanged.
  3. Batch 10: public results collected on 2026-12-03 by transcribers who do not run kvdoctor, under batch 6's six
     rules (fixture README), from sources not in batches 1-9 (a source already used counts only for a GPU and model it
     did not have), mainly vLLM's pull requests and issues. From a pull request only an arm that is stock vLLM is kept
     (the base branch: "main", "before", "baseline"), never the change under review. Rule 1 for such an arm: its vLLM
     release is the newest release published on PyPI on or before the comment's date, unless the thread prints a
     version (`vllm --version`, a banner, a `.devN` string), which then counts. Rows are committed (``"batch": 10``,
     ``"split": "held_out"``) before any of their figures is computed. A row the simulator refuses is listed as left
     out with its reason; no other row is dropped after its figures are seen.
  4. Evaluation, once: batch 10 alone, and the blind pool (batches 6-10). The bar is judged on the blind pool; batch
     10 alone and every held-out row (batches 1-10) are reported beside it, whatever they show. If batch 10 holds no
     row, that is reported and the verdict stays protocol 9's.
  5. No batch-10 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 10"): the three helpers read about 150 threads and pages; the pull-request
  slices kept nothing (base arms with prefix caching off, expert or data parallelism, fp8 KV cache, kernel-picking
  environment variables, models outside the catalog, or no GPU or commands visible). Batch 10 = 1 row: GPUStack's
  Qwen3-8B on an RTX 4090 at vLLM 0.10.1.1 (the run batch 9 left out while the catalog's 4090 had no dense rate).
  Once, with the shipped constants: batch 10 -16.3 / +22.1 / +19.1 %; blind pool (batches 6-10, 179 rows)
  6.40 / 19.72 / 9.40 %, the bar met (bootstrap 90 % interval of the TTFT median 15.5-24.7 %); every held-out row
  (238) 7.6 / 23.5 / 9.3 %. UNCERTAINTY_BANDS rewritten with the row (--bands). Nothing else written.

Protocol 11, "a sixth blind batch, on the GPUs the catalog lacked" (fixed and committed on 2026-12-04, while batch 11
was being collected by a transcriber and before any of its rows was seen or committed; docs/simulation.md, "Protocol
11"):

  1. Why. The blind pool meets the TTFT bar by 0.3 points (bootstrap 15.5-24.7 %), and protocol 10 found the public
     material the six rules admit nearly exhausted. Batches 6-10 left rows out because their GPU was not in the catalog
     (A800, H800, L20, V100, RTX A6000 among them). The catalog gains those parts from their datasheets and public logs
     (scripts/gpus_extra.tsv, every figure with its source), committed before any batch-11 row is evaluated, and their
     results become a new blind batch.
  2. No candidate, no fit: the shipped constants are judged unchanged. The new parts take the coefficients their dies
     already have: A800 = A100's family and MAMF ceiling (the same GA100 die and clocks; only NVLink is cut to
     400 GB/s), H800 = H100's (the same GH100 die; NVLink 400 GB/s); L20, V100 and RTX A6000 the generic family and the
     default MAMF fraction, as every part without a profile.
  3. Batch 11: public results collected on 2026-12-04 by a transcriber who does not run kvdoctor, under batch 6's six
     rules (fixture README) with protocol 10's reading of rule 1, on those GPUs only, from sources not in batches 1-10
     (a source already used counts only for a GPU and model it did not have). Rows are committed (``"batch": 11``,
     ``"split": "held_out"``) before any of their figures is computed. A row the simulator refuses is listed as left
     out with its reason; no other row is dropped after its figures are seen.
  4. Evaluation, once: batch 11 alone, and the blind pool (batches 6-11). The bar is judged on the blind pool; batch 11
     alone and every held-out row (batches 1-11) are reported beside it, whatever they show. If batch 11 holds no row,
     that is reported and the verdict stays protocol 10's.
  5. No batch-11 row, assumption, split or catalog figure changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 11"): the transcriber read about 40 sources in about 105 searches (Chinese and
  English; pages, issues, code, docs) and kept no row. The near misses: pipeline parallelism across hosts on L20s
  (vllm#15322), a pull request's own arm only (vllm#28280, H800), a development build (vllm#40755), models outside the
  catalog or `--max-num-batched-tokens` (RTX A6000), other clients (EvalScope, SGLang's bench, own scripts), V0-era or
  unversioned V100 pages with medians only. Batch 11 holds no row, so nothing was evaluated and the verdict stays
  protocol 10's. The catalog parts were committed (00bed89) and stay.

Protocol 12, "a seventh blind batch, from a general sweep" (fixed and committed on 2026-12-05 at 06:06 UTC, after a
transcriber collected 12 public items into /tmp/sweep15 and before any row of them was made or any figure computed;
docs/simulation.md, "Protocol 12"):

  1. Why. The blind pool meets the TTFT bar by 0.3 points (protocol 10; bootstrap 15.5-24.7 %) and protocol 11 found
     nothing. A helper told only to transcribe `vllm bench serve` results with their deployment (not the six rules, not
     kvdoctor's figures) collected 12 items, 49 runs, from sources not in the earlier batches or sweeps.
  2. No candidate, no fit: the shipped constants are judged unchanged.
  3. Batch 12: the six rules (fixture README, "Batch 6", with protocol 10's reading of rule 1) applied by me to the
     transcriptions, before any row is simulated; the rows are committed (``"batch": 12``, ``"split": "held_out"``)
     before any figure is computed. ShareGPT rows carry ``prior_runs_same_server: []`` as every earlier ShareGPT row
     (the warm-prefix model replays random prompt streams only); a source's reuse of its prompts is written in the row's
     notes. A row the simulator refuses is listed as left out with its reason; no other row is dropped after its
     figures are seen.
  4. Evaluation, once: batch 12 alone, and the blind pool (batches 6-12). The bar is judged on the blind pool; batch 12
     alone and every held-out row are reported beside it, whatever they show.
  5. No batch-12 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 12"): the rules kept 5 of 49 runs, one source (Qwen2.5-7B-Instruct on an RTX
  4090, vLLM 0.25.1, ShareGPT x200 at concurrency 1-32; a Qwen3-32B TP2 RTX A6000 series met the rules but its stored
  copy names no citable source). Once, with the shipped constants: batch 12 5.9 / 49.4 / 8.7 %; blind pool (batches
  6-12, 184 rows) 6.38 / 22.13 / 9.29 %: the TTFT bar is MISSED (bootstrap 90 % interval of the median 16.2-28.3 %);
  every held-out row (243) 7.6 / 24.7 / 9.2 %. UNCERTAINTY_BANDS rewritten with the rows (--bands). Found after the
  evaluation: the embedded ShareGPT lengths carry 1.7x the prompt and 1.9x the output tokens the bench sent.

Protocol 13, "the bench's own ShareGPT sample" (fixed and committed on 2026-12-05, after protocol 12's evaluation found
the ShareGPT workload 1.7x / 1.9x too long, and before the change below was made or evaluated):

  1. Why. `--dataset-name sharegpt` drew from Vidur's sharegpt_8k_filtered table (Llama-2 tokenizer, whole
     conversations): 368-374 prompt and 421-423 output tokens a request, where the bench printed 217-218 and 201-218
     (vllm#17788; batch 12). A workload error, not a time-model one.
  2. The change, one thing: the default ShareGPT lengths become the bench's own sample, the 200 requests of a saved
     `benchmark_serving.py --dataset-name sharegpt --seed 0 --num-prompts 200 --save-result` file (surajssd/llm-k8s
     at 58b61c59, Llama-3.3-70B-Instruct's tokenizer, April 2025): its ``input_lens`` as the prompts and its
     ``output_lens`` (the tokens the server generated, at most the reference reply) as the outputs, in the file's
     order, which is the bench's draw order for seed 0. More requests than 200 are drawn again from them, seeded.
     Nothing in the time model, the front end or any row changes; nothing is fitted.
  3. Evaluation: the fixture's 19 ShareGPT rows before and after, every figure reported. They are all seen rows (5
     of them batch 12's, whose errors motivated the change), so this is no blind judgement: the blind pool's verdict
     stays protocol 12's (TTFT missed) until a batch collected after this commit is judged.

  Outcome (docs/simulation.md, "Protocol 13"): the 19 ShareGPT rows' median errors 20.5 / 55.0 / 21.3 % -> 18.6 /
  56.5 / 16.5 %; batch 12 alone 5.9 / 49.4 / 8.7 % -> 5.9 / 16.2 / 8.4 %. The simulated requests now average 213-224
  prompt / 200-212 output tokens (the sources printed 217-223 / 201-218). The blind pool recomputed with the new
  workload reads 6.38 / 19.13 / 9.29 %, not a verdict. Protocols 1-12's records are recomputed on the table they used
  (SHAREGPT_PATH = pre13_sharegpt()); UNCERTAINTY_BANDS rewritten on the new workload (--bands).

Protocol 14, "an eighth blind batch, after protocol 13" (fixed and committed on 2026-12-05 at 07:27 UTC, before batch 14
was collected and before any of its rows existed):

  1. Why. Protocol 12's blind pool misses the TTFT bar (22.13 %); protocol 13 changed the ShareGPT workload after
     seeing batch 12, so only results collected after it can judge the model as it now stands.
  2. No candidate, no fit: the shipped constants and protocol 13's workload are judged unchanged.
  3. Batch 14: public results collected on 2026-12-05 by a transcriber who does not run kvdoctor, under batch 6's six
     rules with protocol 10's reading of rule 1, from sources not in batches 1-12, the sweeps of this stop or the
     ShareGPT totals protocol 13's search read. Rows are committed (``"batch": 14``, ``"split": "held_out"``) before any
     of their figures is computed. A row the simulator refuses is listed as left out with its reason; no other row is
     dropped after its figures are seen.
  4. Evaluation, once, with protocol 13's workload: batch 14 alone; the verdict pool, batches 6-11 and 14 (batch 12,
     which motivated protocol 13, left out of the pool that judges it); and beside them batches 6-14 and every
     held-out row, whatever they show. If batch 14 holds no row, that is reported and the verdict stays protocol 12's.
  5. No batch-14 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 14"): the transcriber checked about 30 sources and admitted none. The
  rejections were: sources already used; models outside the catalog (Qwen3-Next, DeepSeek-V3.1, -VL checkpoints);
  --max-num-batched-tokens or fp8 KV set; sglang's client; releases before 0.8; hardware outside the catalog. One
  lead, vllm#36559's base arm on an H200, could not be admitted because the excerpt cuts the serve line before the
  model. Batch 14 holds no row, so nothing was evaluated and the verdict stays protocol 12's. For context (seen rows,
  not a verdict): the pool protocol 14 would have judged, batches 6-11 with protocol 13's workload, reads 6.39 /
  19.14 / 9.40 % (179 rows).

Protocol 15, "protocol 14 again, collected untargeted" (fixed and committed on 2026-12-05 at 07:30 UTC, before batch
15 was collected):

  1. Why. Protocol 14's targeted search found no row. Protocol 12's untargeted sweep had found five rows in twelve
     items.
  2. No candidate, no fit: the shipped constants and protocol 13's workload, unchanged.
  3. Batch 15 is collected as batch 12 was. A helper is told only to transcribe `vllm bench serve` results with their
     deployment; it is not told the rules or kvdoctor's figures. Sources come from outside batches 1-14, this stop's
     sweeps and protocol 13's search. The six rules are then applied by me, and the rows committed (``"batch": 15``,
     ``"split": "held_out"``) before any figure is computed.
  4. Evaluation, once, with protocol 13's workload:
     - batch 15 alone;
     - the verdict pool, batches 6-11 and 15;
     - beside them, batches 6-15 and every held-out row.
     If batch 15 holds no row, the verdict stays protocol 12's.
  5. No batch-15 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 15"): the helper transcribed 10 items and 13 runs, and the rules kept none.
  - DGX Spark GB10 with a nightly image (rules 1 and 3);
  - 4× MI100 (rule 3; batch 6 had already left the same file out);
  - vLLM 0.6.3 and 0.5.0 threads (rule 1);
  - vllm#15322's L20 pp3+tp8 across hosts (rule 3; batch 11 had already left it out).
  Batch 15 holds no row, nothing was evaluated, and the verdict stays protocol 12's.

Protocol 16, "a ninth blind batch, two collectors" (fixed and committed on 2026-12-05 at 08:26 UTC, before batch 16
was collected and before any of its rows existed):

  1. Why. Protocol 12's blind pool misses the TTFT bar (22.13 %); protocols 14 and 15 found no row to judge protocol
     13's workload by.
  2. No candidate, no fit: the constants and workload of this commit are judged unchanged. A change made to the model
     after this commit is not judged by batch 16; it waits for a later batch.
  3. Batch 16 is collected by two helpers told only to transcribe `vllm bench serve` results with their deployment (not
     the six rules, not kvdoctor's figures): one reads GitHub (issues, pull requests, repositories), one reads public
     pages (blogs, tutorials, vendors' write-ups, Q&A). Sources come from outside batches 1-15, the earlier sweeps and
     protocol 13's search (/tmp/batch16/EXCLUDE.txt, 500 entries). The six rules are then applied by me, and the rows
     committed (``"batch": 16``, ``"split": "held_out"``) before any figure is computed.
  4. Evaluation, once, with the model of this commit:
     - batch 16 alone;
     - the verdict pool, batches 6-11 and 16 (batch 12 motivated protocol 13, so it stays out);
     - beside them, batches 6-16 and every held-out row.
     If batch 16 holds no row, the verdict stays protocol 12's.
  5. No batch-16 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 16"): the GitHub collector transcribed 12 sources, 41 runs; the pages
  collector 7 sources, 25 runs. The rules kept none:
  - accelerators outside the catalog or not GPUs: DGX Spark GB10, Jetson Thor, TPU v6e/7x, Ascend 910B, a Mac's CPU,
    AMD MI300X/MI355 (rules 1 and 3);
  - a vLLM fork (vllm_hybrid), V0-era 0.6.3, images tagged only `latest` or `nightly` (rule 1);
  - GPU or model not stated, data-parallel pods over two nodes, prefill/decode disaggregation (rules 3 and 4);
  - an fp8 KV cache with --max-num-batched-tokens (rule 5), medians only or no prompt count (rules 5 and 6);
  - the one near miss, Qwen2.5-3B-Instruct on an L40S under vLLM 0.27.1 at max-num-seqs 1-16: the card is a HAMi
    slice limited to 16,000 MiB (a setting the row schema cannot carry, rule 5) and its stored copy names no
    repository to cite (protocol 12's precedent).
  Batch 16 holds no row, nothing was evaluated, and the verdict stays protocol 12's.

Protocol 17, "a tenth blind batch, from vLLM's own pull requests of 2026" (fixed and committed on 2026-12-05 at 08:56
UTC, before batch 17 was collected and before any of its rows existed):

  1. Why. Protocols 14-16 read about 80 sources after protocol 13 and found no row; vLLM's own pull requests post
     before/after `vllm bench serve` results whose baseline arm is stock vLLM main at the PR's date (rule 1's
     main-branch clause), and protocol 10 found rows there.
  2. No candidate, no fit: the model of this commit. Its serving predictions are those of protocol 16's commit (the
     changes since, offline benches and readers, do not touch a `vllm bench serve` prediction); a later change is not
     judged by batch 17.
  3. Batch 17 is collected by one helper told only to transcribe the baseline (unpatched) arms of `vllm bench serve`
     results posted in vllm-project/vllm pull requests and issues dated 2026, with their deployment; it is not told
     the six rules or kvdoctor's figures. Threads already used or listed in /tmp/batch17/EXCLUDE.txt are skipped. The
     six rules are then applied by me, and the rows committed (``"batch": 17``, ``"split": "held_out"``) before any
     figure is computed.
  4. Evaluation, once: batch 17 alone; the verdict pool, batches 6-11, 16 and 17; beside them every held-out row.
     If batch 17 holds no row, the verdict stays protocol 12's.
  5. No batch-17 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 17"): the helper transcribed 9 threads, 11 baseline rows, from search
  excerpts (the threads themselves cannot be read whole here). The rules kept none: NVFP4 checkpoints or an fp8 KV
  cache (rules 4 and 5: #34265, #39897, #50231), the GPU or the model not visible (rule 3: #37421, #43250, #43078,
  #35777, #47276), the commands not visible (rule 5: #33680), medians only (rule 6: #47276, #50231). Batch 17 holds no
  row, nothing was evaluated, and the verdict stays protocol 12's.

Protocol 18, "an eleventh blind batch, from files read whole" (fixed and committed on 2026-12-05 at 11:24 UTC, before
batch 18 was collected and before any of its rows existed):

  1. Why. Protocols 14-17 read about 90 sources after protocol 13 and found no row; most were rejected because a search
     excerpt cut the GPU, the model or the commands away. Repository files (committed bench outputs, saved result
     JSONs, result write-ups) can be read whole with the library's read_file, and batches 6-8 found most of their
     rows in such files.
  2. No candidate, no fit: the model of this commit, whose `vllm bench serve` predictions equal protocol 16's; a
     later change is not judged by batch 18.
  3. Batch 18 is collected by two helpers told only to transcribe `vllm bench serve` / `benchmark_serving.py`
     results with their deployment from repository files they open whole (one starts from printed result blocks, one
     from saved result JSONs and result tables); they are not told the six rules or kvdoctor's figures. Sources in
     batches 1-17, the sweeps and /tmp/batch18/EXCLUDE.txt (791 entries) are skipped. The six rules are then applied
     by me, and the rows committed (``"batch": 18``, ``"split": "held_out"``) before any figure is computed.
  4. Evaluation, once: batch 18 alone; the verdict pool, batches 6-11 and 16-18; beside them every held-out row. If
     batch 18 holds no row, the verdict stays protocol 12's.
  5. No batch-18 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 18"): the two helpers transcribed 5 sources, 28 runs. The rules kept none:
  - dstackai/benchmarks' Llama-3.1-405B on 8× MI300X: vLLM 0.6.3.dev (V0) and a `--dataset-name book` the stock
    client lacks (rules 1, 2 and 3);
  - SongXP111/vllm-serving-lab's Qwen3-8B-AWQ on an RTX 5080 Laptop GPU at vLLM 0.25.1: a GPU outside the catalog and
    `--max-num-batched-tokens 4096` (rules 3 and 5);
  - guoenhui-tora/llm-serving-benchmarks' DeepSeek-V4-Flash NVFP4 on 4× RTX 6000D, TP2/PP2 and TP4 at vLLM
    0.29.0/0.30.0: NVFP4 experts, an fp8 KV cache and speculative decoding, outside the catalog (rules 3, 4 and 5).
  The index does not search saved JSON files, and a find_string hit names no repository, so several whole files
  could not be cited. Batch 18 holds no row, nothing was evaluated, and the verdict stays protocol 12's.

Protocol 19, "rows the rules left out only for what the schema and catalog lacked" (fixed and committed on 2026-12-05
before batch 19 was collected and before any of its rows existed):

  1. Why. Five protocols since protocol 13 (14-18) read about 95 sources and found no row. Among the rejections of
     batches 6-18, two reasons are gaps of this project rather than of the sources: rule 5's "a server setting the row
     schema cannot carry (fp8 KV cache, `--max-num-batched-tokens`)", and rule 3's "a GPU the simulator can run", for
     GeForce cards whose dense tensor rate the catalog lacked (batch 6's seven RTX 5090 rows). No figure of any such
     row was ever computed.
  2. The changes, made in this commit and nothing else: (a) the row schema carries ``kv_cache_dtype`` and
     ``max_num_batched_tokens``, passed through the same resolver the CLI uses (``--kv-cache-dtype``,
     ``--max-num-batched-tokens``); (b) the catalog gains the dense bf16 / fp8 rates (fp32 accumulate, no sparsity) of
     the GeForce RTX 5090 (209.5 / 419.2 TFLOPS) and the bf16 rate of the RTX 3090 (71.0), from NVIDIA's architecture
     whitepapers as public tables carry them (scripts/build_catalog.py, TENSOR_RATES). The time model, its constants
     and the workloads are unchanged; every existing row's prediction is the same.
  3. Batch 19 is collected by one helper told only to transcribe `vllm bench serve` / `benchmark_serving.py` results
     with their deployment (not the rules, not kvdoctor's figures): first the sources earlier batches left out for
     exactly these reasons (pegainfer's RTX 5090 page; adithyaJRunpod/vllm_bench's fp8-KV and
     `--max-num-batched-tokens` runs), then new runs with an fp8 KV cache, `--max-num-batched-tokens`, or on an RTX
     5090 / 3090. Sources that earlier batches used (rows in the fixture) are skipped.
  4. The six rules are then applied by me with rule 5 reading "a server setting the row schema cannot carry" as
     everything but ``kv_cache_dtype`` (auto / fp8 / fp8_e4m3 / fp8_e5m2) and ``max_num_batched_tokens``, and rule 3
     as "a GPU of the catalog with a dense bf16 rate" (laptop parts, whose clocks follow the maker's power limit, stay
     out). The rows are committed (``"batch": 19``, ``"split": "held_out"``) before any figure is computed.
  5. Evaluation, once: batch 19 alone; the verdict pool, batches 6-11 and 16-19 (batch 12 motivated protocol 13 and
     stays out); beside them every held-out row. If batch 19 holds no row, the verdict stays protocol 12's.
  6. No batch-19 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 19"): 45 runs from 6 sources; the rules kept 22 runs of RunPod's Qwen3-8B H100
  tuning sweeps (fp8 KV, fp8 weights, --max-num-batched-tokens, baselines; vLLM 0.18.0; no TPOT printed), committed in
  fadc48e before any figure. Judged once: batch 19 6.3 % / 28.5 % (every TTFT under-predicted); the verdict pool
  (batches 6-11 and 16-19, 201 rows, 84 TTFTs) 6.39 / 19.94 / 9.40 %: the bar met, TTFT by 0.06 points (bootstrap 90 %
  interval 16.4-25.9 %); every held-out row (265) 7.4 / 23.8 / 9.2 %. UNCERTAINTY_BANDS rewritten (--bands). Nothing
  else written.

Protocol 20, "protocol 19's rules on new sources" (fixed and committed on 2026-12-05 at 15:20 UTC, before batch 20 was
collected and before any of its rows existed):

  1. Why. Protocol 19's pool meets the TTFT bar by 0.06 points (bootstrap 16.4-25.9 %): a coin toss that only more
     blind rows can settle, either way. Its reading of the rules (an fp8 KV cache and --max-num-batched-tokens carried,
     the RTX 5090 / 3090 rates) opened runs that protocols 14-18 had to refuse.
  2. No change to the model or the schema: the model of this commit, whose predictions equal protocol 19's.
  3. Batch 20 is collected by one transcribe-only helper (not told the rules or kvdoctor's figures), from sources that
     no batch 1-19 used (/tmp/batch20/EXCLUDE.txt: the fixture's source files and repositories, and batch 19's
     transcribed and rejected sources), aiming at the same kinds of runs as protocol 19's step 3.
  4. The rules are applied as protocol 19 reads them; the rows are committed (``"batch": 20``, ``"split":
     "held_out"``) before any figure is computed.
  5. Evaluation, once: batch 20 alone; the verdict pool, batches 6-11 and 16-20; beside them every held-out row. If
     batch 20 holds no row, the verdict stays protocol 19's.
  6. No batch-20 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 20"): 23 runs from 3 sources; the rules kept 15 (Qwen3-14B bf16/AWQ on an
  L40S, ShareGPT at vLLM 0.29; Llama-3.1-8B bf16/FP8/FP8-KV on an L40S, random at vLLM 0.24, throughput only),
  committed in 6c814dc before any figure. Judged once: batch 20 20.5 / 17.6 / 29.1 % (every FP8 run's throughput
  over-predicted, +17 … +27 %); the verdict pool (batches 6-11 and 16-20, 216 rows, 87 TTFTs) 6.79 / 19.94 / 9.49 %: the
  bar met, TTFT by 0.06 points (bootstrap 16.2-25.9 %); every held-out row (280) 7.6 / 23.6 / 9.3 %. UNCERTAINTY_BANDS
  rewritten (--bands). Nothing else written.

Protocol 21, "eager mode as two streams, judged on a twelfth blind batch" (fixed and committed on 2026-12-05 at 17:04
UTC, before any row of batch 21 was read by the integrator or simulated):

  1. Why. The eager rows the model has met are priced too dear where the GPU is busy: RunPod's five eager runs of
     batch 19 (Qwen3-8B, H100, 128 in flight) predict output throughput -34 ... -38 %, batch 6's two -16 % and -36 %;
     uncalibrated, IBM's GuideLLM synchronous runs on L40S (granite-3.3-8b, eager; not in the pool) predict TPOT +33 %
     and +51 %. K adds ``eager_layer_ms`` per layer to the GPU step (a sum), fitted on one row: vllm#20469 (batch 1,
     Qwen3-14B-AWQ on an A100 at concurrency 1). In eager mode PyTorch launches each kernel from Python
     asynchronously; the CPU runs ahead of the GPU until the step's sync (the sampled tokens' copy to the host), so
     a step lasts as long as the LONGER of the two streams, not their sum: launch-bound at small batches (that fit
     row), GPU-bound at large ones (the H100 runs). Disclosed: the seen rows above prompted this candidate.
  2. Candidate E (``serving={"eager_overlap": True, "eager_layer_ms": E_EAGER_LAYER_MS}``; sim/steptime.py): an
     eager step is max(the GPU's kernels as with piecewise graphs: graph_step_ms + graph_layer_ms per layer + the
     MoE term; the CPU's launch stream: eager_step_ms + eager_layer_ms per layer), the engine's CPU work added or
     overlapped as before, exact in decode jumps (``decode_cpu_line``). ``eager_layer_ms`` is refitted under E on the
     fit rows that depend on it (the one row K's value came from), the soft_l1 loss with f_scale 0.1 on its three
     log errors, by a bounded scalar search over [0, 2] ms (the solver's Jacobian is zero at K's value, where the
     launch stream lies under the GPU step): 0.536 ms (``e_refit``). Nothing else changes: every CUDA-graph row
     predicts exactly as under K (tests/unit/test_fit_serving_protocol21.py).
  3. Batch 21 is collected by one transcribe-only helper, started at 17:01 UTC, before this commit was written
     (it was told neither the rules, nor kvdoctor's figures, nor this candidate), from sources no batch 1-20 used
     (/tmp/batch21/EXCLUDE.txt), asked first for eager runs beside a CUDA-graph baseline, then for runs that print
     mean TTFT, then FP8 / AWQ runs.
  4. The rules are applied as protocol 19 reads them; the rows are committed (``"batch": 21``, ``"split":
     "held_out"``) before any figure is computed.
  5. Evaluation, once, with K and with E: batch 21 alone, its eager rows, the verdict pool (batches 6-11 and 16-21),
     every held-out row; the seen eager rows (batches 1, 6, 19) reported beside them, labelled as seen. E replaces K
     only if all three hold: (a) batch 21 has at least one eager row with a figure, and over the figures of its eager
     rows E's median |error| is lower than K's; (b) E's score on the verdict pool (the mean of the three medians) is
     not higher than K's; (c) E meets on the verdict pool every bar K meets there. Otherwise K stays, and E's figures
     are reported. If batch 21 holds no row, the verdict stays protocol 20's.
  6. No batch-21 row, assumption or split changes after its errors are seen.

  Amendment (17:06 UTC, before any figure of batch 21 was computed): the helper's 38 runs from 6 sources hold no
  row under the rules (reasons in the fixture README); one more transcribe-only helper is sent for step 3's first aim
  (eager runs beside a CUDA-graph baseline, then TTFT-printing runs), skipping the first helper's sources too
  (/tmp/batch21b/EXCLUDE.txt). Its rows, if any, are batch 21's; nothing else changes.

  Outcome (docs/simulation.md, "Protocol 21"): batch 21 holds no row (38 runs from 6 sources, none kept; the second
  helper transcribed none), so the verdict stays protocol 20's and E is not adopted (rule part a). E's one evaluation
  (--protocol21), reported: the seen eager rows' throughput -16 ... -38 % -> -7 ... -31 %, their TTFT -2 ... -14 % ->
  -27 ... -35 %; the verdict pool 6.79 / 19.94 / 9.49 % (K) -> 6.67 / 24.71 / 9.49 % (E): parts b and c fail too.
  Nothing written.

    python scripts/fit_serving.py --protocol21          # step 5 (K and E; --e-refit prints step 2's fit)

Protocol 22, "async scheduling plans a step ahead" (fixed and committed on 2026-12-05 at 17:29 UTC, before candidate A
was evaluated on any public row and before batch 22 was collected):

  1. Why. Every load regime's TTFT is predicted low on the held-out rows (150 TTFTs: 115 low, signed median -20 %;
     closed loop -27 %, all at once -20 %, open loop -16 %, one at a time -11 %: coefficients.UNCERTAINTY_BANDS), and
     protocol 21 showed that a step-time fix cannot show in TTFT while that lean stands. vLLM 0.33's
     ``EngineCore.step_with_batch_queue`` (async scheduling: the default on GPUs from 0.13 in kvdoctor's engine
     defaults) schedules batch j and submits it, then blocks on batch j-1: batch j is planned as batch j-1 starts on
     the GPU, so a request that reaches a busy engine while batch j-1 runs is first planned into batch j+1. The
     simulator plans step j when step j-1 ends and admits what arrived by then: one step early. Its scheduler is
     identical to vLLM's step for step, but the differential check drives vLLM with kvdoctor's own attribution of
     arrivals to steps, so it could not see this. Disclosed: the TTFT lean is known from seen rows; the mechanism is
     read from vLLM's source, and nothing is fitted.
  2. Candidate A (``sim.run.PLAN_AHEAD = True``): with async scheduling the plan of step j admits the requests that
     reached the engine by the start of step j-1; by now when nothing was in flight (an idle engine) or after an
     empty plan that processed the step in flight. No constant changes; synchronous engines (vLLM < 0.13 rows,
     ``--no-async-scheduling``, the CPU platform) predict as under K. Checked before this commit: hand-worked timings
     and exact decode jumps (tests/unit/test_sim_plan_ahead.py), and the differential check identical to vLLM 0.33
     on all 100 async and 200 sync mixes with A on and with A off (``--steps-out`` now names the arrivals queued
     before an empty plan, ``replanned``, which the oracle side replays).
  3. Batch 22 is collected by one transcribe-only helper (not told the rules, kvdoctor's figures or this candidate)
     from sources no batch 1-21 used (/tmp/batch22/EXCLUDE.txt), aiming at runs of vLLM 0.13 or later that print
     mean TTFT under load (a rate or a --max-concurrency above 1) on NVIDIA GPUs of the catalog.
  4. The rules are applied as protocol 19 reads them; the rows are committed (``"batch": 22``, ``"split":
     "held_out"``) before any figure is computed.
  5. Evaluation, once, with K and with A: batch 22 alone; the verdict pool (batches 6-11 and 16-22); every held-out
     row; and within each, the rows of an async engine with a TTFT. A replaces K only if all three hold: (a) over the
     async rows of batch 22 with a TTFT, A's median |TTFT error| is not higher than K's; if batch 22 holds no such
     row, (a) is decided on the verdict pool's async TTFT rows instead (seen rows: disclosed as such; A fits
     nothing); (b) A's verdict-pool score (the mean of the three medians) is not higher than K's; (c) A meets on the
     verdict pool every bar K meets there. Otherwise K stays. Reported beside, whatever they show: the calibrated
     public series and the frozen CPU-engine sessions (synchronous: unchanged by construction).
  6. No batch-22 row, assumption or split changes after its errors are seen.

  Outcome (docs/simulation.md, "Protocol 22"): batch 22 holds no row (42 runs from 12 sources, none citable: the code
  index names no repository for a text hit; each also fails another rule), so part (a) was decided on the verdict
  pool's async TTFT rows (68): K 19.72 % -> A 19.20 % (signed median -15.8 % -> -1.1 %); (b) score 12.07 -> 11.77 %;
  (c) the pool 6.79 / 19.94 / 9.49 -> 6.59 / 19.27 / 9.47 %. ADOPTED: sim.run.PLAN_AHEAD = True. Every held-out row
  7.63 / 23.64 / 9.26 -> 7.59 / 22.89 / 9.13 %. UNCERTAINTY_BANDS rewritten (--bands).

    python scripts/fit_serving.py --protocol22          # step 5 (K and A)

Protocol 23, "the shipped model on a thirteenth blind batch" (fixed and committed on 2026-12-06 at 03:38 UTC; batch 23's
items were transcribed earlier this morning by a helper of a general sweep, /tmp/sweep85, and no figure of them has been
read by the author or computed by kvdoctor):

  1. Why. The verdict pool meets the TTFT bar by under a point (protocol 22: 19.27 % against 20 %); only more blind rows
     can settle it, either way.
  2. No change to the model, the schema or the catalog: the model of this commit (protocol 22's A, shipped).
  3. Batch 23 is sweep 85's items: a transcribe-only helper asked for complete `vllm bench serve` result blocks of vLLM
     0.10-0.33 with the server side stated (model, GPU type and count, TP, the bench command); it was told neither the
     rules nor kvdoctor's figures. Sources that any batch 1-22 used (a row's source_url, a README entry) are dropped
     first, then the six rules are applied as protocol 19 reads them (rule 5 carries kv_cache_dtype and
     max_num_batched_tokens; rule 3 is a catalog GPU with a dense bf16 rate), before any figure is computed. The rows
     are committed (``"batch": 23``, ``"split": "held_out"``) before any prediction of them exists.
  4. Evaluation, once: batch 23 alone; the verdict pool, batches 6-11 and 16-23; beside them every held-out row. If
     batch 23 holds no row, the verdict stays protocol 22's.
  5. No batch-23 row, assumption or split changes after its errors are seen; UNCERTAINTY_BANDS is rewritten with the
     rows (--bands) and nothing else is written.

Protocol 24, "public multi-load series, blind, calibrated on their saturated run" (fixed and committed on 2026-12-07 at
17:12 UTC, while three transcribe-only helpers collect batch 24 and before any of its figures has been read by the author
or computed by kvdoctor; the calibrated half is in scripts/calibrate_public_later.py's docstring):

  1. Why. Issue 11's calibrated bar (10 % on other loads of one deployment, calibrated on one run) holds on batches 4 and
     7 and the GuideLLM sweeps, whose anchors were saturated runs, and misses on the Tenstorrent sweeps and batch 3,
     whose fixed anchors were light runs. Only series never seen can say whether "calibrate on the saturated run"
     carries over. Their rows are also blind rows for the uncalibrated bars.
  2. No change to the model, the catalog or the constants. One schema addition, made in this commit before any figure:
     ``random_range_ratio`` (vLLM's ``--random-range-ratio``; absent or null = 0, exact lengths), which the series
     script's ``bench_run`` passes to the bench's own length draw.
  3. Batch 24 is three helpers' collections (GitHub issues and pull requests; web pages; repository files), each asked
     for series of ONE deployment at three or more loads with vLLM's random dataset, told neither the rules nor
     kvdoctor's figures (/tmp/b24, outside the repo). Sources any batch 1-23 used are dropped first; then the six rules
     as protocol 19 reads them, run by run. The rows are committed (``"batch": 24``, ``"split": "held_out"``) with
     their ``anchor`` (scripts/calibrate_public_later.py, ``saturated_anchor``) before any prediction of them exists.
  4. Evaluation, once (``--protocol24``): batch 24 alone; the verdict pool, batches 6-11 and 16-24; every held-out row.
     If batch 24 holds no row, the verdict stays protocol 23's.
  5. No batch-24 row, assumption, anchor or split changes after its errors are seen; UNCERTAINTY_BANDS is rewritten with
     the rows (--bands) and nothing else is written.

  Outcome (docs/simulation.md, "Protocol 24"): the rules kept one series of six runs (Qwen3-4B-Instruct-2507 on one RTX
  3090, vLLM 0.28.0, random 256/128 x100 at --max-concurrency 1-64; c9912ce). Batch 24 13.7 / 173 / 8.1 % (its TTFT
  +82 ... +211 % from c4 up: no server history in the rows; the second reading stated before the evaluation gives
  3.3 / 34 / 2.7 %); the verdict pool (223) 6.66 / 19.89 / 9.54 %, every bar still met, TTFT by 0.11 points; every
  held-out row (287) 7.62 / 23.76 / 9.34 %. UNCERTAINTY_BANDS rewritten.

    python scripts/fit_serving.py --protocol24          # step 4

Writes the SERVING / FRONTEND / SERVING_FIT blocks of src/kvdoctor/sim/coefficients.py and a
markdown table (--report) for docs/simulation.md. ``--check`` only evaluates the current
coefficients (no fit, nothing written).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
FIXTURE = REPO / "tests" / "fixtures" / "bench_public" / "results.jsonl"
COEFFS = REPO / "src" / "kvdoctor" / "sim" / "coefficients.py"
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")


def load_rows(path: Path = FIXTURE) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


_DEPLOY_CACHE: dict = {}
# What does not depend on the fitted constants is built once per row and reused by every evaluation
# (deployment, scheduler limits, workload with its warm prefixes): only the step-time model and the
# front end change with the parameters. ``CACHE = False`` rebuilds everything (the unit test checks both
# give the same numbers).
CACHE = True
_ROW_CACHE: dict = {}


# ShareGPT rows: protocols 1-12 evaluated them on Vidur's sharegpt_8k_filtered table (Llama-2 tokenizer, whole
# conversations); protocol 13 replaced it with the bench's own sample, kvdoctor's embedded default (None here). The
# records of protocols 1-12 are recomputed on the table they were judged with: SHAREGPT_PATH = pre13_sharegpt().
SHAREGPT_PATH: str | None = None


def pre13_sharegpt() -> str:
    """The length table protocols 1-12 used (../shared/data, KVDOCTOR_SHARED_DATA)."""
    base = os.environ.get("KVDOCTOR_SHARED_DATA") or str(REPO.parent / "shared" / "data")
    return str(Path(base) / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")


def _row_key(row: dict) -> str:
    return json.dumps({k: v for k, v in row.items() if k not in ("measured", "notes", "split", "source_url")},
                      sort_keys=True) + f"|cold={COLD_CACHE}|evict={EVICTION}|sharegpt={SHAREGPT_PATH}"


def deployment(row: dict):
    """(shape, gpu, resolved, num_blocks) of a row, through the same resolver the CLI uses."""
    from kvdoctor.cli.common import ConfigOptions, resolve_inputs
    from kvdoctor.ledger.build import build_ledger

    # the sweeps' servers ran with a max_model_len that fits their longest request: the next power of two
    need = (row.get("input_len") or 1024) + (row.get("output_len") or 1024) + 16
    mml = row.get("max_model_len") or max(4096, 1 << math.ceil(math.log2(need)))
    key = (row["model"], row["gpu"], row["tp"], row.get("quantization"), row.get("enforce_eager"),
           row.get("max_num_seqs"), mml, row.get("vllm_version"), row.get("gpu_memory_utilization"),
           row.get("num_gpu_blocks"), row.get("kv_cache_dtype"), row.get("max_num_batched_tokens"))
    if CACHE and key in _DEPLOY_CACHE:
        return _DEPLOY_CACHE[key]
    model = row["model"]
    if model.startswith("tests/"):
        model = str(REPO / model)
    opts = ConfigOptions(model=model, gpu=row["gpu"], tensor_parallel_size=row["tp"],
                         quantization=row.get("quantization"), enforce_eager=row.get("enforce_eager") or None,
                         max_num_seqs=row.get("max_num_seqs"), max_model_len=str(mml),
                         gpu_memory_utilization=row.get("gpu_memory_utilization"),
                         # protocol 19: the two server settings the schema did not carry before
                         kv_cache_dtype=row.get("kv_cache_dtype"),
                         max_num_batched_tokens=(str(row["max_num_batched_tokens"])
                                                 if row.get("max_num_batched_tokens") else None),
                         vllm_version=row.get("vllm_version") or "0.9.2")
    inputs = resolve_inputs(opts)
    led = build_ledger(inputs.shape, inputs.gpu, inputs.resolved)
    # the KV blocks the server's own start-up log printed, where the row has them (batch 3): the time model is
    # what is evaluated here, not the memory ledger's estimate of the pool
    nb = int(row["num_gpu_blocks"]) if row.get("num_gpu_blocks") else led.num_blocks
    out = (inputs.shape, inputs.gpu, inputs.resolved, nb)
    if CACHE:
        _DEPLOY_CACHE[key] = out
    return out


def row_setup(row: dict):
    """(shape, gpu, resolved, scheduler config, workload) of a row: everything but the time model."""
    from kvdoctor.sim.whatif import layout_of, sched_config

    key = _row_key(row)
    if CACHE and key in _ROW_CACHE:
        return _ROW_CACHE[key]
    shape, gpu, resolved, nb = deployment(row)
    cfg = sched_config(resolved, nb, layout_of(shape, gpu, resolved))
    w = workload(row, cfg)
    out = (shape, gpu, resolved, cfg, w)
    if CACHE:
        _ROW_CACHE[key] = out
    return out


def workload(row: dict, cfg=None):
    from kvdoctor.sim.workload import WorkloadSpec, build_workload

    rate = row.get("request_rate")
    rate = math.inf if rate in (None, "inf") else float(rate)
    n = int(row["num_prompts"])
    if row["dataset"] == "sharegpt":
        spec = WorkloadSpec(dataset_name="sharegpt", num_prompts=n, request_rate=rate, dataset_path=SHAREGPT_PATH,
                            max_concurrency=row.get("max_concurrency"), ignore_eos=True)
    else:
        spec = WorkloadSpec(dataset_name="random", num_prompts=n, request_rate=rate,
                            max_concurrency=row.get("max_concurrency"), random_input_len=int(row["input_len"]),
                            random_output_len=int(row["output_len"]), ignore_eos=True,
                            random_range_ratio=float(row.get("random_range_ratio") or 0.0))  # protocol 24's field
    w = build_workload(spec)
    if not COLD_CACHE:
        w = replace(w, warm_prefix=warm_prefix_of(row, w, cfg))
    return w


# --cold: evaluate as if every run had started on a fresh server (the model before the warm cache)
COLD_CACHE = False
# --no-evict: the warm prefixes as if the KV pool held everything ever served (the evaluation before
# sim.workload.cached_heads); by default only what the row's pool still holds counts, as calibrate does
EVICTION = True
# the prior runs' output lengths are not in the rows (the sweeps' OSL is 128, 1024 for the one 128/1024
# run); for the eviction model every earlier request is taken to have produced this many tokens, the most
# any sweep run asked for, so the pool is charged at least what it held
PRIOR_OUTPUT_TOKENS = 1024


def warm_prefix_of(row: dict, w, cfg=None) -> list[int] | None:
    """Prompt tokens of each request already cached when the row's run started, from the bench's
    documented procedure (never from the measured TTFT): ``bench_test_request`` (the bench sends
    request 0 once, untimed, before the run) and ``prior_runs_same_server`` ([input_len, num_prompts]
    of the random runs that preceded on the same server, whose prompt i the run's prompt i extends:
    sim.workload.warm_prefix_after_runs). With ``cfg`` (the row's scheduler limits) and ``EVICTION``,
    only what the row's KV pool still holds when the run starts counts (sim.workload.cached_heads, the
    eviction model calibrate's ``warm_prefixes`` uses: least recently freed first, over the test requests
    and the prior runs; the run's own requests evict in the simulation itself)."""
    from kvdoctor.sim.workload import cached_heads, warm_prefix_after_runs

    prior = row.get("prior_runs_same_server") or []
    test = bool(row.get("bench_test_request"))
    if not prior and not test:
        return None
    # prompt tokens = input_len + the special tokens the workload adds; earlier runs' prompts likewise.
    # An entry [input_len, num_prompts] is a run of the row's own prompt stream (its --seed); [input_len,
    # num_prompts, seed(, output_len)] names the stream (batch 7: repeats with other seeds between the row's runs)
    # and the run's output length where the source states it; only runs of the row's own ``stream`` share its
    # prompts, while every run takes room in the pool.
    extra = (w.prompt[0] - int(row["input_len"])) if row.get("input_len") else 0
    own = row.get("stream", "s")
    runs = [(int(e[0]) + extra, int(e[1]), e[2] if len(e) > 2 else own,
             int(e[3]) if len(e) > 3 else PRIOR_OUTPUT_TOKENS) for e in prior]
    warm = warm_prefix_after_runs(list(w.prompt), [(r[0], r[1]) for r in runs if r[2] == own], test_prompt=test)
    if cfg is None or not EVICTION:
        return warm
    history: list = []
    for length, n, st, out in runs:  # each run preceded by its own test request
        if test:
            history.append((st, 0, length, out))
        history += [(st, i, length, out) for i in range(n)]
    if test:
        history.append((own, 0, w.prompt[0], w.output[0]))
    # what the pool holds when the run starts: the simulator's own pool evicts during the run (BlockPool.warm);
    # serving the run one request at a time here would charge a burst's outputs before its prompts are admitted
    held = cached_heads(history, list(w.prompt), list(w.output), own, cfg.block_size, cfg.num_blocks,
                        serve_run=False)
    return [min(a, b) for a, b in zip(warm, held)]


def simulate_row(row: dict, serving: dict, frontend: dict) -> dict:
    """Predicted (output tok/s, mean TTFT ms, mean TPOT ms) as the bench computes them."""
    from kvdoctor.sim.frontend import FrontEnd
    from kvdoctor.sim.run import simulate
    from kvdoctor.sim.steptime import from_deployment

    shape, gpu, resolved, cfg, w = row_setup(row)
    model = from_deployment(shape, gpu, resolved, serving=serving)
    r = simulate(w, cfg, model, detail=False, frontend=FrontEnd(**frontend))
    return bench_metrics(r)


def bench_metrics(r) -> dict:
    fin = r.status == 2
    out = r.output_tokens[fin].astype(float)
    ttft = r.ttft_s[fin]
    e2e = r.e2e_s[fin]
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
    return {"output_throughput": float(r.summary.output_tokens_per_s),
            "mean_ttft_ms": float(np.nanmean(ttft) * 1e3) if np.isfinite(ttft).any() else None,
            "mean_tpot_ms": float(np.nanmean(tpot) * 1e3) if np.isfinite(tpot).any() else None}


def errors(rows, serving, frontend) -> list[dict]:
    out = []
    for row in rows:
        pred = simulate_row(row, serving, frontend)
        e = {}
        for m in METRICS:
            meas = row["measured"].get(m)
            # a figure the simulation did not produce (no request completed: the deployment as stated holds less
            # than one of the row's requests, and vLLM would refuse to start) is no prediction, not an error of NaN
            if meas is not None and pred.get(m) and math.isfinite(pred[m]):
                e[m] = pred[m] / meas - 1.0
        out.append({"id": row["id"], "split": row["split"], "batch": row.get("batch", 1), "pred": pred, "err": e,
                    "refused": not pred.get("output_throughput")})
    return out


def median_abs(errs, metric) -> float | None:
    v = [abs(x["err"][metric]) for x in errs if metric in x["err"]]
    return float(np.median(v)) if v else None


PARAMS = [  # name, initial (warm start from the previous run of this script), lower, upper
    ("compute_scale.a100", 1.07, 0.2, 2.0),
    ("compute_scale.h100", 1.40, 0.2, 2.0),
    ("overhead_scale", 0.0, 0.0, 2.0),
    ("graph_layer_ms", 0.059, 0.0, 0.5),
    ("eager_layer_ms", 0.25, 0.0, 2.0),
    # served prefill attention (FlashAttention-2/3, FlashInfer) vs the older A100 attention profile:
    # long prompts' TTFT pins it (the 8192-token fit rows)
    ("attn_prefill_scale", 1.46, 0.5, 4.0),
    # fused-MoE grouped GEMMs relative to the dense GEMM roofline (the MoE fit rows)
    ("moe_factor", 0.54, 0.3, 2.0),
    # Marlin int4 GEMMs reach >= 60 % of bandwidth at small batch (Frantar et al., "MARLIN", 2024:
    # near-ideal ~3.9x over fp16 at batch 1-16): below that the fit would only be absorbing other overheads
    ("int4_mem_eff", 0.7, 0.6, 1.2),
    ("moe_layer_ms", 0.045, 0.0, 1.0),
    ("frontend.per_request_s", 0.0089, 0.0, 0.2),
    # (protocol 3, "engine CPU") the V1 engine core's Python work per running request per step (schedule(),
    # _update_states/_prepare_inputs, update_from_output): added to the GPU step without async scheduling,
    # max(GPU, CPU) with it (sim/steptime.py); 0 in the prior
    ("engine_cpu_per_req_ms", 0.0, 0.0, 0.5),
    # (protocol 3) the API server's output processing per output token (detokenize + SSE per request per step,
    # OutputProcessor.process_outputs): occupies the front end (sim/frontend.py); 0 in the prior
    ("frontend.per_output_token_s", 0.0, 0.0, 0.001),
    # (frontend.per_prompt_token_s, tokenisation per prompt token, was tried: bounded at 2 us/token it
    # ran to its bound, i.e. it absorbed prefill compute the c1 sweeps cannot separate from it; left at 0)
]


def unpack(x) -> tuple[dict, dict]:
    from kvdoctor.sim import coefficients as C

    serving = json.loads(json.dumps(C.SERVING))
    frontend = dict(C.FRONTEND)
    for (name, *_), v in zip(PARAMS, x):
        if name.startswith("compute_scale."):
            serving["compute_scale"][name.split(".")[1]] = float(v)
        elif name.startswith("frontend."):
            frontend[name.split(".")[1]] = float(v)
        else:
            serving[name] = float(v)
    cs = serving["compute_scale"]
    cs["generic"] = float(np.sqrt(cs["a100"] * cs["h100"]))
    return serving, frontend


def row_residuals(row, serving, frontend) -> list[float]:
    """log(pred / measured) of the row's three figures (0 where a figure is not measured)."""
    pred = simulate_row(row, serving, frontend)
    out = []
    for m in METRICS:
        meas = row["measured"].get(m)
        out.append(math.log(pred[m] / meas) if (meas is not None and pred.get(m)) else 0.0)
    return out


def loss(x, rows) -> np.ndarray:
    serving, frontend = unpack(x)
    res = []
    for row in rows:
        res += row_residuals(row, serving, frontend)
    return np.array(res)


def dependence(rows, x, only=None) -> list[list[int]]:
    """For each parameter, the rows whose figures it moves (a structural property: int4 terms touch only
    4-bit rows, MoE terms only MoE rows, a GPU's compute scale only that GPU's rows), found by moving it
    across a tenth of its range from ``x``. The Jacobian re-simulates only those rows."""
    f0 = loss(x, rows).reshape(len(rows), len(METRICS))
    dep = []
    for j, (_, _, lo, hi) in enumerate(PARAMS):
        if only is not None and j not in only:
            dep.append([])  # a fixed term: the Jacobian never asks
            continue
        x1 = np.array(x, float)
        h = 0.1 * (hi - lo)
        x1[j] = x1[j] + h if x1[j] + h <= hi else x1[j] - h
        f1 = loss(x1, rows).reshape(len(rows), len(METRICS))
        dep.append([i for i in range(len(rows)) if np.any(f1[i] != f0[i])])
    return dep


class Objective:
    """Residuals and a forward-difference Jacobian that re-simulates only the rows a parameter moves, over
    the free parameters ``idx`` (the others held at ``base``); every evaluation is logged to ``log``."""

    def __init__(self, rows, idx, base, lo, hi, dep, log=None, diff_step=0.01):
        self.rows, self.idx, self.base, self.lo, self.hi = rows, list(idx), np.array(base, float), lo, hi
        self.dep, self.log, self.diff_step, self.nfev, self._last = dep, log, diff_step, 0, None

    def full(self, z):
        x = self.base.copy()
        x[self.idx] = z
        return x

    def fun(self, z):
        key = np.asarray(z, float).tobytes()
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        f = loss(self.full(z), self.rows)
        self.nfev += 1
        self._last = (key, f)
        if self.log:
            self.log(f"eval {self.nfev} cost {0.5 * float(f @ f):.5f} x {np.round(self.full(z), 5).tolist()}")
        return f

    def jac(self, z):
        f0 = self.fun(z)
        J = np.zeros((len(f0), len(self.idx)))
        for k, j in enumerate(self.idx):
            rows = self.dep[j]
            if not rows:
                continue
            # relative step, floored at 1 % of the range for terms at or near 0
            h = self.diff_step * max(abs(z[k]), 0.01 * (self.hi[k] - self.lo[k]))
            if z[k] + h > self.hi[k]:
                h = -h
            x1 = self.full(z)
            x1[j] += h
            serving, frontend = unpack(x1)
            for i in rows:
                r1 = row_residuals(self.rows[i], serving, frontend)
                J[3 * i:3 * i + 3, k] = (np.array(r1) - f0[3 * i:3 * i + 3]) / h
        return J


# the ten terms of the warm-cache refit (protocol 2), before the engine-CPU terms existed
PARAMS_WARM = [p[0] for p in PARAMS if p[0] not in ("engine_cpu_per_req_ms", "frontend.per_output_token_s")]
NEW_TERMS = ["engine_cpu_per_req_ms", "frontend.per_output_token_s"]

# Protocol 3 (engine CPU, 28 fit rows; docstring): K = the committed constants (no fit; --cv scores it as
# "committed"), A = the new terms free, B = A + compute scales + front-end per-request cost, C = everything free.
# CV groups: the row's source page (``source_group``).
CANDIDATES = {
    "A": {"free": NEW_TERMS, "loss": "soft_l1", "f_scale": 0.1, "group_by": "source", "start_margin": 0.01},
    "B": {"free": NEW_TERMS + ["compute_scale.a100", "compute_scale.h100", "frontend.per_request_s"],
          "loss": "soft_l1", "f_scale": 0.1, "group_by": "source", "start_margin": 0.01},
    "C": {"free": None, "loss": "soft_l1", "f_scale": 0.1, "group_by": "source", "start_margin": 0.01},
}
# Protocol 2 (warm-cache refit, 19 fit rows, not adopted): its three candidates, kept to reproduce that record
# (``--cv`` on today's 28 fit rows gives other numbers than the record's 19).
CANDIDATES_WARM = {
    "C1": {"free": PARAMS_WARM, "loss": "soft_l1", "f_scale": 0.2, "group_by": "group"},
    "C2": {"free": PARAMS_WARM, "loss": "soft_l1", "f_scale": 0.5, "group_by": "group"},
    "C3": {"free": PARAMS_WARM, "loss": "soft_l1", "f_scale": 0.1, "group_by": "group"},
}


def source_group(row: dict) -> str:
    """Protocol 3's CV group: the source page of the row (a GitHub issue/PR, or a file path without its commit)."""
    u = row["source_url"].split("#")[0].rstrip("/")
    u = re.sub(r"^https?://(www\.)?github\.com/", "", u)
    u = re.sub(r"/blob/[0-9a-f]{7,40}/", "/blob/", u)
    return u


def cv_group(row: dict, cand: dict) -> str:
    return source_group(row) if cand.get("group_by") == "source" else row["group"]


# Protocol 4: the one candidate besides K, fitted on every row of batches 1-5 (``fit_on``)
CANDIDATES_P4 = {
    "P4": {"free": ["compute_scale.a100", "compute_scale.h100", "attn_prefill_scale", "graph_layer_ms",
                    "frontend.per_request_s"], "loss": "soft_l1", "f_scale": 0.1, "group_by": "source",
           "fit_on": "batches1-5"},
}


def candidate_fit_rows(rows: list[dict], cand: dict) -> list[dict]:
    """The rows a candidate is fitted on: the ``fit`` split (protocols 2-3), or every row of batches 1-5 (protocol 4,
    whose held-out set is batch 6)."""
    if cand.get("fit_on") == "batches1-5":
        return [r for r in rows if r.get("batch", 1) <= 5]
    return [r for r in rows if r["split"] == "fit"]


# Not a candidate (the protocol's choice is among CANDIDATES only): the procedure that produced the committed
# constants (fit under the cold evaluation, soft_l1 0.2), cross-validated the same way and scored warm, so that
# the committed constants have an out-of-group figure beside their in-sample one.
REFERENCE = {"R0": {"free": PARAMS_WARM, "loss": "soft_l1", "f_scale": 0.2, "cold_fit": True, "group_by": "group"}}
ALL_CANDIDATES = {**CANDIDATES, **CANDIDATES_WARM, **CANDIDATES_P4, **REFERENCE}


def fit_candidate(rows, cand: dict, log=None, max_nfev: int = 100, dep=None, start=None, tol: float = 1e-4):
    """The protocol's fit (step 2) of one candidate on ``rows``: returns (x, info). ``start`` (PARAMS order;
    default the committed constants) and ``tol`` serve the convergence check: a restart from the solution
    with tighter tolerances."""
    from scipy.optimize import least_squares

    base = np.array(current_values() if start is None else start, float)
    names = [p[0] for p in PARAMS]
    idx = [names.index(n) for n in cand["free"]] if cand.get("free") else list(range(len(PARAMS)))
    lo = np.array([PARAMS[i][2] for i in idx])
    hi = np.array([PARAMS[i][3] for i in idx])
    z0 = np.clip(base[idx], lo, hi)
    # start strictly inside the bounds (a start on a bound stalls trf's first step). Protocol 3 starts terms that
    # sit on a bound (the new terms at their prior 0) 1 % of the range inside: at 1e-6 of the range trf's
    # trust region (x_scale "jac") starts ~1e-6 wide and candidate A stopped on ftol without moving
    margin = cand.get("start_margin", 1e-6) if start is None else 1e-6
    z0 = np.clip(z0, lo + margin * (hi - lo), hi - margin * (hi - lo))
    base[idx] = z0
    if dep is None:
        dep = dependence(rows, base, only=set(idx))
    obj = Objective(rows, idx, base, lo, hi, dep, log)
    sol = least_squares(obj.fun, z0, jac=obj.jac, bounds=(lo, hi), loss=cand["loss"], f_scale=cand["f_scale"],
                        ftol=tol, xtol=tol, gtol=1e-8, max_nfev=max_nfev, x_scale="jac")
    info = {"status": int(sol.status), "message": str(sol.message), "nfev": int(sol.nfev), "njev": int(sol.njev),
            "cost": float(sol.cost), "optimality": float(sol.optimality), "converged": bool(sol.status > 0)}
    if log:
        log(f"done {info}")
    return obj.full(sol.x), info


def _cv_fold(args):
    """One fold of the cross-validation, in a worker process (nice 19: the box is shared)."""
    cand_name, group, log_path = args
    try:
        os.nice(19)
    except OSError:
        pass
    rows = [r for r in load_rows() if r["split"] == "fit"]
    cand = ALL_CANDIDATES[cand_name]
    train = [r for r in rows if cv_group(r, cand) != group]
    test = [r for r in rows if cv_group(r, cand) == group]
    with open(log_path, "a") as fh:
        def log(msg):
            fh.write(f"{cand_name} -{group}: {msg}\n")
            fh.flush()
        global COLD_CACHE
        COLD_CACHE = bool(cand.get("cold_fit"))
        try:
            x, info = fit_candidate(train, cand, log=log)
        finally:
            COLD_CACHE = False
    serving, frontend = unpack(x)
    return cand_name, group, x.tolist(), info, errors(test, serving, frontend)


def cv_score(errs) -> dict:
    out = {m: median_abs(errs, m) for m in METRICS}
    out["score"] = float(np.mean([out[m] for m in METRICS]))
    out["n"] = len(errs)
    return out


def cross_validate(names, log_path, procs: int = 2, folds_path: str | None = None) -> dict:
    """The protocol's step 4: leave-one-group-out CV of each candidate within the fit rows. Each finished
    fold is appended to ``folds_path`` (JSON lines) as it comes, and folds already there are not rerun."""
    import multiprocessing as mp

    rows = [r for r in load_rows() if r["split"] == "fit"]
    done = []
    if folds_path and Path(folds_path).exists():
        done = [json.loads(x) for x in Path(folds_path).read_text().splitlines() if x.strip()]
    have = {(d[0], d[1]) for d in done}
    jobs = [(c, g, log_path) for c in names for g in sorted({cv_group(r, ALL_CANDIDATES[c]) for r in rows})
            if (c, g) not in have]
    res = [tuple(d) for d in done]
    if jobs:
        with mp.get_context("fork").Pool(procs) as pool:
            for r in pool.imap_unordered(_cv_fold, jobs, chunksize=1):
                res.append(r)
                if folds_path:
                    with open(folds_path, "a") as fh:
                        fh.write(json.dumps(r) + "\n")
    out = {}
    for c in names:
        errs = [e for (cn, g, x, info, es) in res if cn == c for e in es]
        out[c] = {"cv": cv_score(errs),
                  "folds": {g: {"x": x, "info": info} for (cn, g, x, info, es) in res if cn == c},
                  "rows": errs}
    return out


def current_values() -> list[float]:
    """The committed coefficients, in PARAMS order (the warm start of a partial refit)."""
    from kvdoctor.sim import coefficients as C

    out = []
    for name, *_ in PARAMS:
        if name.startswith("compute_scale."):
            out.append(C.SERVING["compute_scale"][name.split(".")[1]])
        elif name.startswith("frontend."):
            out.append(C.FRONTEND.get(name.split(".")[1], 0.0))
        else:
            out.append(C.SERVING.get(name, 0.0))  # a term newer than the committed constants: 0, its prior
    return out


def fit_subset(rows, names: list[str]):
    """Refit only ``names`` (the rest stay at the committed values), on ``rows``."""
    from scipy.optimize import least_squares

    base = np.array(current_values())
    idx = [[p[0] for p in PARAMS].index(n) for n in names]
    lo = np.array([PARAMS[i][2] for i in idx])
    hi = np.array([PARAMS[i][3] for i in idx])

    def full(z):
        x = base.copy()
        x[idx] = z
        return x

    sol = least_squares(lambda z: loss(full(z), rows), np.clip(base[idx], lo, hi), bounds=(lo, hi), diff_step=0.05,
                        max_nfev=4, loss="soft_l1", f_scale=0.2)
    return full(sol.x)


def fit(rows):
    from scipy.optimize import least_squares

    x0 = np.array([p[1] for p in PARAMS])
    lo = np.array([p[2] for p in PARAMS])
    hi = np.array([p[3] for p in PARAMS])
    # robust loss: single runs of a few requests carry outliers (a 4096-token TTFT below the 2048-token one)
    sol = least_squares(loss, np.clip(x0, lo, hi), bounds=(lo, hi), args=(rows,), diff_step=0.05, max_nfev=10,
                        loss="soft_l1", f_scale=0.2)
    return sol.x


def table(errs) -> str:
    lines = ["| result | batch | split | output tok/s err | mean TTFT err | mean TPOT err |", "|---|---|---|---|---|---|"]
    for e in errs:
        f = lambda m: f"{e['err'][m]:+.0%}" if m in e["err"] else "—"
        lines.append(f"| {e['id']} | {e['batch']} | {e['split']} | {f('output_throughput')} | {f('mean_ttft_ms')} |"
                     f" {f('mean_tpot_ms')} |")
    return "\n".join(lines)


def summary(errs) -> dict:
    """Median |error| per split; ``held_out_batch1`` … ``held_out_batch5`` (and ``fit_batch<b>``) separate the first
    collection from the rows added later (each later batch's split was committed before the model was first run on it;
    batches 3 and 4 are held out whole, batch 5 is split by source). ``held_out_batch12``: the held-out rows of the
    refit that wrote ``coefficients.SERVING_FIT`` (batches 1 and 2), the set its recorded errors describe."""
    out = {}
    groups = {"fit": lambda e: e["split"] == "fit", "held_out": lambda e: e["split"] == "held_out",
              "held_out_batch12": lambda e: e["split"] == "held_out" and e.get("batch", 1) in (1, 2),
              # protocol 4: every row the P4 candidate was fitted on, and the batch it was not
              "batches1_5": lambda e: e.get("batch", 1) <= 5,
              # protocol 5: every row first evaluated after it was committed, with constants fixed before it was collected
              "blind_batches6_7": lambda e: e.get("batch", 1) in (6, 7),
              # protocol 7: the blind pool with batch 8
              "blind_batches6_8": lambda e: e.get("batch", 1) in (6, 7, 8),
              # protocol 9: the blind pool with batch 9
              "blind_batches6_9": lambda e: e.get("batch", 1) in (6, 7, 8, 9),
              # protocol 10: the blind pool with batch 10
              "blind_batches6_10": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10),
              # protocol 11: the blind pool with batch 11 (the GPUs the catalog lacked)
              "blind_batches6_11": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11),
              # protocol 12: the blind pool with batch 12 (a general sweep)
              "blind_batches6_12": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 12),
              # batch 12 alone ("held_out_batch12" already names the refit's held-out rows of batches 1 and 2)
              "batch12_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 12,
              # protocol 14: batch 14 alone; its verdict pool leaves out batch 12 (which motivated protocol 13)
              "batch14_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 14,
              "pool_p14": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 14),
              "blind_batches6_14": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 12, 14),
              # protocol 15: batch 15 alone, its verdict pool (batches 6-11 and 15), and batches 6-15
              "batch15_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 15,
              "pool_p15": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 15),
              "blind_batches6_15": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 12, 14, 15),
              # protocol 19: batch 19 alone and its verdict pool (batches 6-11 and 16-19; 16-18 hold no row)
              "batch19_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 19,
              "pool_p19": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19),
              # protocol 20: batch 20 alone and its verdict pool (batches 6-11 and 16-20)
              "batch20_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 20,
              "pool_p20": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20),
              # protocol 21: batch 21 alone and its verdict pool (batches 6-11 and 16-21)
              "batch21_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 21,
              "pool_p21": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21),
              # protocol 22: batch 22 alone and its verdict pool (batches 6-11 and 16-22; 21 holds no row)
              "batch22_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 22,
              "pool_p22": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22),
              # protocol 23: batch 23 alone and its verdict pool (batches 6-11 and 16-23; 21 and 22 hold no row)
              "batch23_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 23,
              "pool_p23": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23),
              # protocol 24: batch 24 alone and its verdict pool (batches 6-11 and 16-24)
              "batch24_held_out": lambda e: e["split"] == "held_out" and e.get("batch", 1) == 24,
              "pool_p24": lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, *range(16, 25))}
    for b in range(1, 12):
        groups[f"held_out_batch{b}"] = lambda e, b=b: e["split"] == "held_out" and e.get("batch", 1) == b
        groups[f"fit_batch{b}"] = lambda e, b=b: e["split"] == "fit" and e.get("batch", 1) == b
    for name, keep in groups.items():
        sel = [e for e in errs if keep(e)]
        if not sel:
            continue
        out[name] = {m: median_abs(sel, m) for m in METRICS}
        out[name]["n"] = len(sel)
    return out


# Protocol 8 (docs/simulation.md): the API server's CPU per streamed token measured on the real engine (vLLM 0.32,
# completions endpoint), charged as each step's tokens come out. Nothing fitted.
P8_PER_OUTPUT_TOKEN_S = 120e-6


def protocol8(rows: list[dict], serving: dict, frontend: dict, k_errors: list[dict] | None = None) -> dict:
    """Protocol 8's one evaluation: K (the committed constants) and P8 on every held-out row and the blind pool,
    and the rule's parts (a)-(c) ((d), the 1-hour trace, only matters for an adoption). ``k_errors``: K's
    ``errors`` on ``rows`` when already computed."""
    p8 = {**frontend, "per_output_token_s": P8_PER_OUTPUT_TOKEN_S, "output_per_step": True}
    held = [r for r in rows if r["split"] == "held_out"]
    k_held = [e for e in k_errors if e["split"] == "held_out"] if k_errors is not None else None
    out = {"frontend": p8}
    for name, fe in (("K", frontend), ("P8", p8)):
        errs = k_held if name == "K" and k_held is not None else errors(held, serving, fe)
        s = summary(errs)
        out[name] = {"held_out": s["held_out"], "blind_batches6_8": s["blind_batches6_8"]}
    k, p = out["K"], out["P8"]
    rule = {
        "a": p["held_out"]["mean_ttft_ms"] < k["held_out"]["mean_ttft_ms"],
        "b": all(p["held_out"][m] <= k["held_out"][m] + 0.005 for m in ("output_throughput", "mean_tpot_ms")),
        "c": all(p["blind_batches6_8"][m] <= k["blind_batches6_8"][m] + 0.01 for m in METRICS),
    }
    out["rule"] = rule
    out["adopt"] = all(rule.values())
    return out


# Protocol 21, candidate E: eager mode as two streams (sim/steptime.py, ``eager_overlap``), with ``eager_layer_ms``
# refitted under it on the one eager fit row (``e_refit``; docstring step 2).
E_EAGER_LAYER_MS = 0.536


def e_serving(serving: dict, eager_layer_ms: float = E_EAGER_LAYER_MS) -> dict:
    return {**serving, "eager_overlap": True, "eager_layer_ms": eager_layer_ms}


def e_refit(rows: list[dict], serving: dict, frontend: dict) -> dict:
    """Step 2: ``eager_layer_ms`` under E on the eager fit rows, by a bounded scalar search of protocol 2's soft_l1
    loss (f_scale 0.1) over [0, 2] ms. Returns the value, the loss and the rows' log errors at it."""
    from scipy.optimize import minimize_scalar

    fit_rows = [r for r in rows if r["split"] == "fit" and r.get("enforce_eager")]

    def res(z: float) -> np.ndarray:
        return np.array([x for r in fit_rows for x in row_residuals(r, e_serving(serving, z), frontend)])

    def cost(z: float) -> float:
        r = res(z) / 0.1
        return float(np.sum(2 * (np.sqrt(1 + r * r) - 1)))

    sol = minimize_scalar(cost, bounds=(0.0, 2.0), method="bounded", options={"xatol": 1e-4})
    return {"eager_layer_ms": float(sol.x), "loss": float(sol.fun), "rows": [r["id"] for r in fit_rows],
            "log_errors": [round(float(x), 4) for x in res(float(sol.x))]}


def protocol21(rows: list[dict], serving: dict, frontend: dict) -> dict:
    """Protocol 21's one evaluation: K and E on every row; batch 21, its eager rows, the verdict pool, every held-out
    row and the seen eager rows; the rule's parts (a)-(c)."""
    eager = {r["id"] for r in rows if r.get("enforce_eager")}
    out: dict = {"eager_layer_ms": E_EAGER_LAYER_MS}
    for name, sv in (("K", serving), ("E", e_serving(serving))):
        errs = errors(rows, sv, frontend)
        s = summary(errs)
        b21e = [e for e in errs if e.get("batch") == 21 and e["id"] in eager]
        seen = [e for e in errs if e.get("batch", 1) < 21 and e["id"] in eager]
        out[name] = {k: s.get(k) for k in ("batch21_held_out", "pool_p21", "held_out")}
        out[name]["batch21_eager"] = {"n": len(b21e), "figures": sum(len(e["err"]) for e in b21e),
                                      "median_abs_all_figures": (float(np.median([abs(v) for e in b21e
                                                                                  for v in e["err"].values()]))
                                                                 if any(e["err"] for e in b21e) else None)}
        out[name]["seen_eager_rows"] = {e["id"]: {m: round(v, 4) for m, v in e["err"].items()} for e in seen}
        out[name]["errors"] = errs
    k, e = out["K"], out["E"]
    ka, ea = k["batch21_eager"]["median_abs_all_figures"], e["batch21_eager"]["median_abs_all_figures"]
    bars = {"output_throughput": 0.15, "mean_ttft_ms": 0.20, "mean_tpot_ms": 0.20}
    kp, ep = k["pool_p21"], e["pool_p21"]
    score = {n: float(np.mean([x[m] for m in METRICS])) for n, x in (("K", kp), ("E", ep))}
    rule = {"a": ka is not None and ea < ka,
            "b": score["E"] <= score["K"],
            "c": all(ep[m] <= bars[m] for m in METRICS if kp[m] <= bars[m])}
    out.update(score=score, rule=rule, adopt=all(rule.values()))
    return out


def async_row(row: dict) -> bool:
    """Whether the row's engine schedules asynchronously (kvdoctor's resolved defaults for its release and flags)."""
    return bool(deployment(row)[2].async_scheduling)


def protocol22(rows: list[dict], serving: dict, frontend: dict) -> dict:
    """Protocol 22's one evaluation: K and A (``sim.run.PLAN_AHEAD``) on every row; batch 22, the verdict pool, every
    held-out row, and the async rows with a TTFT in each; the rule's parts (a)-(c)."""
    import kvdoctor.sim.run as R

    asyn = {r["id"] for r in rows if async_row(r)}
    out: dict = {"async_rows": len(asyn)}
    keep = R.PLAN_AHEAD
    try:
        for name, on in (("K", False), ("A", True)):
            R.PLAN_AHEAD = on
            errs = errors(rows, serving, frontend)
            s = summary(errs)
            res = {k: s.get(k) for k in ("batch22_held_out", "pool_p22", "held_out")}
            for grp, sel in (("batch22_async", lambda e: e.get("batch") == 22),
                             ("pool_async", lambda e: e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20,
                                                                             21, 22)),
                             ("held_out_async", lambda e: e["split"] == "held_out")):
                sub = [e for e in errs if sel(e) and e["id"] in asyn and "mean_ttft_ms" in e["err"]]
                res[grp] = {"n": len(sub), "mean_ttft_ms": median_abs(sub, "mean_ttft_ms"),
                            "signed_median_ttft": float(np.median([e["err"]["mean_ttft_ms"] for e in sub]))
                            if sub else None}
            res["errors"] = errs
            out[name] = res
    finally:
        R.PLAN_AHEAD = keep
    k, a = out["K"], out["A"]
    basis = "batch22_async" if k["batch22_async"]["n"] else "pool_async"
    bars = {"output_throughput": 0.15, "mean_ttft_ms": 0.20, "mean_tpot_ms": 0.20}
    kp, ap = k["pool_p22"], a["pool_p22"]
    score = {n: float(np.mean([x[m] for m in METRICS])) for n, x in (("K", kp), ("A", ap))}
    rule = {"a": a[basis]["mean_ttft_ms"] is not None and a[basis]["mean_ttft_ms"] <= k[basis]["mean_ttft_ms"],
            "b": score["A"] <= score["K"],
            "c": all(ap[m] <= bars[m] for m in METRICS if kp[m] <= bars[m])}
    out.update(rule_a_basis=basis, score=score, rule=rule, adopt=all(rule.values()))
    return out


def blind_batch(rows: list[dict], serving: dict, frontend: dict, batch: int) -> dict:
    """One blind batch's evaluation (protocols 23 and 24): the shipped model (no candidate) on every row; the batch with
    each of its rows' signed errors, its verdict pool (batches 6-11 and 16 up to it) with which bars it meets and a
    bootstrap 90 % interval of its TTFT median, and every held-out row."""
    errs = errors(rows, serving, frontend)
    s = summary(errs)
    bars = {"output_throughput": 0.15, "mean_ttft_ms": 0.20, "mean_tpot_ms": 0.20}
    pool = s[f"pool_p{batch}"]
    members = (6, 7, 8, 9, 10, 11, *range(16, batch + 1))
    sel = [e for e in errs if e.get("batch", 1) in members and "mean_ttft_ms" in e["err"]]
    ttft = np.array([abs(e["err"]["mean_ttft_ms"]) for e in sel])
    rng = np.random.default_rng(batch)
    boot = [float(np.median(rng.choice(ttft, len(ttft)))) for _ in range(2000)] if len(ttft) else []
    return {f"batch{batch}": s.get(f"batch{batch}_held_out"), f"pool_p{batch}": pool, "held_out": s["held_out"],
            f"batch{batch}_rows": [{"id": e["id"], "err": e["err"]} for e in errs if e.get("batch") == batch],
            "bars_met": {m: pool[m] is not None and pool[m] <= bars[m] for m in METRICS},
            "pool_ttft_bootstrap90": [float(np.percentile(boot, 5)), float(np.percentile(boot, 95))] if boot else None}


def protocol23(rows: list[dict], serving: dict, frontend: dict) -> dict:
    """Protocol 23's one evaluation (batch 23 and the verdict pool of batches 6-11 and 16-23)."""
    return blind_batch(rows, serving, frontend, 23)


def protocol24(rows: list[dict], serving: dict, frontend: dict) -> dict:
    """Protocol 24's one evaluation, uncalibrated half (batch 24 and the verdict pool of batches 6-11 and 16-24)."""
    return blind_batch(rows, serving, frontend, 24)


def row_regime(row: dict) -> str:
    """The row's load as ``sim.whatif.regime_of`` names a simulated one: its cap, else rate inf = all at once."""
    from kvdoctor.sim.whatif import regime_of

    return regime_of(row.get("max_concurrency"), row.get("request_rate") in (None, "inf"))


def bands(rows: list[dict], errs: list[dict]) -> dict:
    """``coefficients.UNCERTAINTY_BANDS``: over the held-out rows, per load regime and over all of them, each figure's
    median and 80th-percentile |error|, how many results had it (the band `simulate` quotes for a load sent that way),
    its signed median error (``bias``) and how many of those results were predicted below the measured figure
    (``low``): which way a prediction tends to miss (``sim.whatif.lean``)."""
    groups: dict[str, list[dict]] = {"all": []}
    for row, e in zip(rows, errs):
        if row["split"] != "held_out":
            continue
        groups["all"].append(e)
        groups.setdefault(row_regime(row), []).append(e)
    out = {}
    for g, sel in groups.items():
        out[g] = {}
        for m in METRICS:
            signed = [x["err"][m] for x in sel if m in x["err"]]
            v = [abs(x) for x in signed]
            if v:
                out[g][m] = {"median": round(float(np.median(v)), 4), "p80": round(float(np.percentile(v, 80)), 4),
                             "n": len(v), "bias": round(float(np.median(signed)), 4),
                             "low": sum(x < 0 for x in signed)}
    return out


def write_bands(b: dict) -> None:
    text = COEFFS.read_text()
    line = "UNCERTAINTY_BANDS = " + repr(b)
    if re.search(r"^UNCERTAINTY_BANDS = .*$", text, flags=re.M):
        text = re.sub(r"^UNCERTAINTY_BANDS = .*$", lambda _m: line, text, flags=re.M)
    else:
        text = text.rstrip("\n") + ("\n# the committed constants' held-out errors per load regime (scripts/fit_serving.py "
                                    "--bands; sim.whatif.uncertainty)\n") + line + "\n"
    COEFFS.write_text(text)


def write_coeffs(serving, frontend, fit_summary) -> None:
    text = COEFFS.read_text()
    text = re.sub(r"^SERVING = .*$", "SERVING = " + repr(serving), text, flags=re.M)
    text = re.sub(r"^FRONTEND = .*$", "FRONTEND = " + repr(frontend), text, flags=re.M)
    text = re.sub(r"^SERVING_FIT = .*$", "SERVING_FIT = " + repr(fit_summary), text, flags=re.M)
    COEFFS.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="evaluate the current coefficients only")
    ap.add_argument("--baseline", action="store_true",
                    help="evaluate the kernel-profile model alone (neutral serving terms, no front end)")
    ap.add_argument("--report", help="write the per-result markdown table here")
    ap.add_argument("--refit", help="refit only these PARAMS names (comma-separated) from the committed values, "
                                    "on the fit rows")
    ap.add_argument("--cold", action="store_true",
                    help="ignore the warm prefix cache (bench_test_request, prior_runs_same_server): every run "
                         "on a fresh server, as the model was before it")
    ap.add_argument("--cv", metavar="FILE", help="protocol step 4: leave-one-group-out CV of the candidates within "
                                                  "the fit rows; JSON to FILE (finished folds in FILE.folds.jsonl)")
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="which candidates --cv runs (R0: the reference, not a candidate)")
    ap.add_argument("--candidate", choices=sorted({**CANDIDATES, **CANDIDATES_WARM, **CANDIDATES_P4}),
                    help="protocol step 5: fit this candidate on all fit rows (coefficients written only with --adopt)")
    ap.add_argument("--adopt", action="store_true",
                    help="with --candidate: write the fitted constants into coefficients.py (the protocol's step 5 "
                         "rule decides; without it nothing is written)")
    ap.add_argument("--out", help="with --candidate: the fit, its convergence check and every row's errors (JSON)")
    ap.add_argument("--fit-only", action="store_true",
                    help="with --candidate and --out: fit on the fit rows and stop (no row outside the fit is "
                         "simulated: the fit of a candidate can run before the CV has chosen, unseen)")
    ap.add_argument("--from-fit", metavar="FILE", help="evaluate (and with --adopt write) the constants of a "
                                                        "--fit-only FILE instead of fitting again")
    ap.add_argument("--bands", action="store_true",
                    help="evaluate the committed constants and write their held-out errors per load regime "
                         "(coefficients.UNCERTAINTY_BANDS: what simulate quotes as its uncertainty); nothing is fitted")
    ap.add_argument("--protocol24", action="store_true",
                    help="protocol 24's one evaluation (uncalibrated half): the shipped model on batch 24 and the pool")
    ap.add_argument("--protocol23", action="store_true",
                    help="protocol 23's one evaluation: the shipped model on batch 23 and the verdict pool")
    ap.add_argument("--protocol22", action="store_true",
                    help="protocol 22's one evaluation: K and candidate A (async scheduling plans a step ahead)")
    ap.add_argument("--protocol21", action="store_true",
                    help="protocol 21's one evaluation: K and candidate E (eager as two streams) on every row")
    ap.add_argument("--e-refit", action="store_true", help="protocol 21's step 2: eager_layer_ms refitted under E")
    ap.add_argument("--protocol8", action="store_true",
                    help="evaluate protocol 8's front end (P8_FRONTEND: the measured 120 us per streamed token, charged "
                         "per step) against the committed constants, on every held-out row and the blind pool; with "
                         "--adopt, write it if the rule holds (docs/simulation.md, 'Protocol 8')")
    ap.add_argument("--log", default="/tmp/fit_serving.log", help="progress log of the fits")
    ap.add_argument("--procs", type=int, default=2, help="worker processes for --cv (each at nice 19)")
    ap.add_argument("--no-evict", action="store_true",
                    help="warm prefixes as if the KV pool held everything served before (no cached_heads)")
    a = ap.parse_args(argv)
    global EVICTION
    EVICTION = not a.no_evict
    if a.cv:
        os.environ.setdefault("KVDOCTOR_SHARED_DATA", str(REPO.parent / "shared" / "data"))
        out = cross_validate(a.candidates.split(","), a.log, a.procs, a.cv + ".folds.jsonl")
        from kvdoctor.sim import coefficients as C

        fit_rows = [r for r in load_rows() if r["split"] == "fit"]
        out["committed"] = {"cv": cv_score(errors(fit_rows, C.SERVING, C.FRONTEND))}
        Path(a.cv).write_text(json.dumps(out, indent=1))
        print(json.dumps({k: v["cv"] for k, v in out.items()}, indent=1))
        return 0
    if a.refit and (a.check or a.baseline):
        ap.error("--refit fits; it cannot be combined with --check/--baseline")
    global COLD_CACHE
    COLD_CACHE = a.cold
    os.environ.setdefault("KVDOCTOR_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    rows = load_rows()
    from kvdoctor.sim import coefficients as C

    if a.e_refit:
        print(json.dumps(e_refit(rows, C.SERVING, C.FRONTEND), indent=1))
        return 0
    for flag, evaluate in ((a.protocol23, protocol23), (a.protocol24, protocol24)):
        if flag:
            print(json.dumps(evaluate(rows, C.SERVING, C.FRONTEND), indent=1))
            return 0
    for flag, evaluate, cand in ((a.protocol21, protocol21, "E"), (a.protocol22, protocol22, "A")):
        if flag:
            res = evaluate(rows, C.SERVING, C.FRONTEND)
            if a.out:  # every row's errors too
                Path(a.out).write_text(json.dumps(res, indent=1))
            print(json.dumps({k: v for k, v in res.items() if k not in ("K", cand)} | {
                n: {k: v for k, v in res[n].items() if k != "errors"} for n in ("K", cand)}, indent=1))
            return 0
    if a.protocol8:
        res = protocol8(rows, C.SERVING, C.FRONTEND)
        print(json.dumps(res, indent=1))
        if a.adopt and res["adopt"]:
            write_coeffs(C.SERVING, res["frontend"], C.SERVING_FIT)
        return 0
    if a.bands:
        b = bands(rows, errors(rows, C.SERVING, C.FRONTEND))
        write_bands(b)
        print(json.dumps(b, indent=1))
        return 0
    if a.baseline:
        serving = {"compute_scale": {"a100": 1.0, "h100": 1.0, "a40": 1.0, "generic": 1.0}, "int4_mem_eff": 1.0,
                   "moe_factor": 1.0, "graph_step_ms": 0.0, "eager_step_ms": 0.0, "eager_layer_ms": 0.0,
                   "graph_layer_ms": 0.0, "moe_layer_ms": 0.0, "overhead_scale": 1.0, "attn_prefill_scale": 1.0,
                   "full_graph_layer_ms": 0.0}
        frontend = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_token_s": 0.0}
        a.check = True
    elif a.check:
        serving, frontend = C.SERVING, C.FRONTEND
    elif a.from_fit:
        cand_result = json.loads(Path(a.from_fit).read_text())
        x = np.array(cand_result["x"], float)
        serving, frontend = unpack(x)
    else:
        fit_rows = [r for r in rows if r["split"] == "fit"]
        if a.candidate:
            fit_rows = candidate_fit_rows(rows, ALL_CANDIDATES[a.candidate])
            with open(a.log, "a") as fh:
                def log(msg):
                    fh.write(f"{a.candidate} all fit rows: {msg}\n")
                    fh.flush()
                x, info = fit_candidate(fit_rows, ALL_CANDIDATES[a.candidate], log=log)
                # convergence check: restart from the solution with tolerances 100x tighter
                x2, info2 = fit_candidate(fit_rows, ALL_CANDIDATES[a.candidate], log=log, start=x, tol=1e-6)
            cand_result = {"candidate": a.candidate, "x": x.tolist(), "info": info, "restart_x": x2.tolist(),
                           "restart_info": info2, "params": [p[0] for p in PARAMS]}
            if a.fit_only:
                if not a.out:
                    ap.error("--fit-only needs --out")
                Path(a.out).write_text(json.dumps(cand_result, indent=1))
                print(json.dumps(cand_result, indent=1))
                return 0
        else:
            x = fit_subset(fit_rows, a.refit.split(",")) if a.refit else fit(fit_rows)
        serving, frontend = unpack(x)
    errs = errors(rows, serving, frontend)
    s = summary(errs)
    print(json.dumps({"serving": serving, "frontend": frontend, "median_abs_error": s}, indent=1))
    print(table(errs))
    if a.candidate or a.from_fit:
        cand_result.update(serving=serving, frontend=frontend, median_abs_error=s, rows=errs)
        if a.out:
            Path(a.out).write_text(json.dumps(cand_result, indent=1))
    if not a.check and (a.adopt or not (a.candidate or a.from_fit)):
        fs = {"fixture": "tests/fixtures/bench_public/results.jsonl", "median_abs_error": s,
              "held_out_ids": [r["id"] for r in rows if r["split"] == "held_out"]}
        write_coeffs(serving, frontend, fs)
    if a.report:
        Path(a.report).write_text(table(errs) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
