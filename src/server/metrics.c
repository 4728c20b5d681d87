/* metrics.c — GET /metrics in the Prometheus text format: requests by status
 * and route, token counters, throughput, queue depth and KV cache use.
 * Reads the server's counters (under its mutex) and a snapshot of the
 * scheduler's stats; returns a malloc'ed body for the caller. */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *route_names[LMC_N_ROUTES] = {"health", "models", "chat_completions", "completions", "messages",
                                                "tokenize", "detokenize", "metrics", "embeddings", "count_tokens", "other"};

char *metrics_body(lmc_server *s) {
    lmc_sched_stats st;
    lmc_sched_get_stats(s->sched, &st);
    uint64_t by_status[LMC_STATUS_SLOTS], by_route[LMC_N_ROUTES];
    pthread_mutex_lock(&s->mu);
    memcpy(by_status, s->by_status, sizeof by_status);
    memcpy(by_route, s->by_route, sizeof by_route);
    pthread_mutex_unlock(&s->mu);
    lmc_sbuf b = {0};
    sbuf_puts(&b, "# HELP lmc_http_requests_total HTTP requests answered, by status code.\n"
                  "# TYPE lmc_http_requests_total counter\n");
    for (int i = 100; i < LMC_STATUS_SLOTS; i++)
        if (by_status[i]) sbuf_printf(&b, "lmc_http_requests_total{status=\"%d\"} %llu\n", i, (unsigned long long)by_status[i]);
    sbuf_puts(&b, "# HELP lmc_http_requests_by_route_total HTTP requests answered, by route.\n"
                  "# TYPE lmc_http_requests_by_route_total counter\n");
    for (int i = 0; i < LMC_N_ROUTES; i++)
        sbuf_printf(&b, "lmc_http_requests_by_route_total{route=\"%s\"} %llu\n", route_names[i], (unsigned long long)by_route[i]);
    sbuf_printf(&b,
                "# HELP lmc_prompt_tokens_total Prompt tokens of admitted requests.\n"
                "# TYPE lmc_prompt_tokens_total counter\nlmc_prompt_tokens_total %llu\n"
                "# HELP lmc_prompt_tokens_reused_total Prompt tokens whose KV was reused from an earlier request.\n"
                "# TYPE lmc_prompt_tokens_reused_total counter\nlmc_prompt_tokens_reused_total %llu\n"
                "# HELP lmc_generated_tokens_total Tokens sampled.\n"
                "# TYPE lmc_generated_tokens_total counter\nlmc_generated_tokens_total %llu\n",
                (unsigned long long)st.prompt_tokens, (unsigned long long)st.prompt_tokens_reused,
                (unsigned long long)st.generated_tokens);
    sbuf_printf(&b,
                "# HELP lmc_requests_finished_total Generations that ended normally.\n"
                "# TYPE lmc_requests_finished_total counter\nlmc_requests_finished_total %llu\n"
                "# HELP lmc_requests_cancelled_total Generations cancelled (client gone or shutdown).\n"
                "# TYPE lmc_requests_cancelled_total counter\nlmc_requests_cancelled_total %llu\n"
                "# HELP lmc_requests_failed_total Generations that failed.\n"
                "# TYPE lmc_requests_failed_total counter\nlmc_requests_failed_total %llu\n"
                "# HELP lmc_scheduler_steps_total Batched forward steps.\n"
                "# TYPE lmc_scheduler_steps_total counter\nlmc_scheduler_steps_total %llu\n"
                "# HELP lmc_scheduler_busy_seconds_total Wall time spent in steps.\n"
                "# TYPE lmc_scheduler_busy_seconds_total counter\nlmc_scheduler_busy_seconds_total %.6f\n",
                (unsigned long long)st.finished, (unsigned long long)st.cancelled, (unsigned long long)st.failed,
                (unsigned long long)st.steps, st.busy_s);
    sbuf_printf(&b,
                "# HELP lmc_lm_head_rows_total Batch rows run through the LM head (logits).\n"
                "# TYPE lmc_lm_head_rows_total counter\nlmc_lm_head_rows_total %llu\n"
                "# HELP lmc_hidden_only_rows_total Batch rows that needed hidden states only (embeddings, no LM head).\n"
                "# TYPE lmc_hidden_only_rows_total counter\nlmc_hidden_only_rows_total %llu\n",
                (unsigned long long)st.lm_head_rows, (unsigned long long)st.hidden_only_rows);
    sbuf_printf(&b,
                "# HELP lmc_spec_drafted_tokens_total Speculative (n-gram) draft tokens verified.\n"
                "# TYPE lmc_spec_drafted_tokens_total counter\nlmc_spec_drafted_tokens_total %llu\n"
                "# HELP lmc_spec_accepted_tokens_total Speculative draft tokens kept.\n"
                "# TYPE lmc_spec_accepted_tokens_total counter\nlmc_spec_accepted_tokens_total %llu\n",
                (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted);
    double kv_cap = (double)st.n_ctx * st.n_slots;
    sbuf_printf(&b,
                "# HELP lmc_generation_tokens_per_second Generated tokens per busy second over the last 16 steps.\n"
                "# TYPE lmc_generation_tokens_per_second gauge\nlmc_generation_tokens_per_second %.3f\n"
                "# HELP lmc_queue_depth Requests waiting for a sequence slot.\n"
                "# TYPE lmc_queue_depth gauge\nlmc_queue_depth %d\n"
                "# HELP lmc_running_sequences Requests generating now.\n"
                "# TYPE lmc_running_sequences gauge\nlmc_running_sequences %d\n"
                "# HELP lmc_kv_slots Sequence slots of the KV cache.\n"
                "# TYPE lmc_kv_slots gauge\nlmc_kv_slots %d\n"
                "# HELP lmc_kv_slot_positions Positions per slot (context size).\n"
                "# TYPE lmc_kv_slot_positions gauge\nlmc_kv_slot_positions %d\n"
                "# HELP lmc_kv_tokens_active Cached positions held by running requests.\n"
                "# TYPE lmc_kv_tokens_active gauge\nlmc_kv_tokens_active %lld\n"
                "# HELP lmc_kv_tokens_cached Cached positions in all slots (idle ones kept for prefix reuse).\n"
                "# TYPE lmc_kv_tokens_cached gauge\nlmc_kv_tokens_cached %lld\n"
                "# HELP lmc_kv_cache_usage_ratio Share of KV positions held by running requests.\n"
                "# TYPE lmc_kv_cache_usage_ratio gauge\nlmc_kv_cache_usage_ratio %.6f\n",
                st.recent_tok_s, st.queue_depth, st.running, st.n_slots, st.n_ctx, (long long)st.kv_tokens_active,
                (long long)st.kv_tokens_cached, kv_cap > 0 ? st.kv_tokens_active / kv_cap : 0.0);
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}
