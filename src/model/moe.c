/* moe.c — the generic mixture-of-experts block (see moe.h): routing
 * parameters from the config and descriptor row, the step scratch, and the
 * forward as a fixed sequence of backend ops (router matmul, moe_route,
 * grouped expert matmuls, activation, moe_sum with the shared expert).
 */
#include "moe.h"

#include "model.h"

#include <string.h>

int lmc_moe_expert_size(const lmc_config *cfg, const lmc_arch *a) {
    return a->moe->expert_i_dense ? cfg->intermediate_size : cfg->moe_intermediate_size;
}

int lmc_moe_shared_size(const lmc_config *cfg, const lmc_arch *a) {
    const lmc_moe_desc *d = a->moe;
    int has_shared = 0;
    for (int i = 0; i < 2; i++) has_shared |= d->names[i] && d->names[i]->shared;
    if (!has_shared) return 0;
    if (d->shared_i_dense) return cfg->intermediate_size;
    if (cfg->shared_intermediate_size > 0) return cfg->shared_intermediate_size;
    if (cfg->n_shared_experts > 0) return lmc_moe_expert_size(cfg, a) * cfg->n_shared_experts;
    return 0;
}

int64_t lmc_moe_inactive_params(const lmc_config *cfg, const lmc_arch *a) {
    if (!a->moe || cfg->n_experts <= 0) return 0;
    const lmc_moe_names *nm = a->moe->names[0];
    const int64_t per = (nm->e_gate || nm->f_gate_up || nm->x_gate_up ? 3 : 2) * (int64_t)cfg->hidden_size * lmc_moe_expert_size(cfg, a);
    int64_t n = 0;
    for (int il = 0; il < cfg->n_layers && il < LMC_MAX_LAYERS; il++)
        if (!cfg->layer_dense[il]) n += (int64_t)(cfg->n_experts - cfg->n_experts_used) * per;
    return n;
}

lmc_moe_route_op lmc_moe_route_params(const lmc_config *cfg, const lmc_arch *a) {
    const lmc_moe_desc *d = a->moe;
    lmc_moe_route_op op = {.score = d->score, .n_expert = cfg->n_experts, .k = cfg->n_experts_used, .scale = 1.0f};
    switch (d->norm) {
    case LMC_MOE_NORM_CONFIG: op.norm = cfg->norm_topk_prob > 0; break;
    case LMC_MOE_NORM_CONFIG_TRUE: op.norm = cfg->norm_topk_prob != 0; break;
    case LMC_MOE_NORM_ALWAYS: op.norm = 1; break;
    case LMC_MOE_NORM_NEVER: op.norm = 0; break;
    }
    op.norm_eps = d->norm_eps;
    if (d->norm_min_key) op.norm_min = (float)cfg->moe_norm_min;
    if (d->scale_key) op.scale = (float)cfg->routed_scaling_factor;
    if (d->group_keys && cfg->n_group > 1) {
        op.n_group = cfg->n_group;
        op.topk_group = cfg->topk_group;
    }
    op.jitter = cfg->router_jitter >= 0 ? (float)cfg->router_jitter : 0.01f; /* PhimoeConfig's default */
    return op;
}

lmc_status lmc_moe_check_config(const lmc_config *cfg, const lmc_arch *a) {
    const lmc_moe_desc *d = a->moe;
    if (cfg->n_experts <= 0)
        return lmc_fail(LMC_ERR_FORMAT, "%s: config.json names no experts (num_experts / num_local_experts)",
                        cfg->model_type);
    if (d->score == LMC_MOE_SPARSEMIXER && cfg->n_experts_used != 2)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: sparsemixer routing is defined for 2 experts per token, not %d",
                        cfg->model_type, cfg->n_experts_used);
    if (!d->group_keys && cfg->n_group > 1)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: grouped expert selection (n_group) is not part of this architecture",
                        cfg->model_type);
    if (!d->scale_key && cfg->routed_scaling_factor != 1.0)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: routed_scaling_factor is not part of this architecture",
                        cfg->model_type);
    /* Phi-3.5-MoE's rope dict carries short_mscale / long_mscale, which the rope factory does not
     * read: refuse rather than run with another attention factor */
    const char *rope_keys[2] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cfg->text, rope_keys[i]);
        if (cJSON_IsObject(r) && (cJSON_GetObjectItemCaseSensitive(r, "short_mscale") ||
                                  cJSON_GetObjectItemCaseSensitive(r, "long_mscale")))
            return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: rope short_mscale / long_mscale are not supported yet",
                            cfg->model_type);
    }
    return LMC_OK;
}

static lmc_tensor *all_tensors(lmc_moe_scratch *s, int i) {
    lmc_tensor *t[] = {&s->logits, &s->ids, &s->w, &s->gate, &s->up, &s->eout, &s->sh_gate, &s->sh_up, &s->sh_out,
                       &s->sh_logit, &s->gate_up};
    return i < (int)(sizeof t / sizeof t[0]) ? t[i] : NULL;
}

lmc_status lmc_moe_scratch_init(lmc_moe_scratch *s, const lmc_model *m, int n_batch_max) {
    memset(s, 0, sizeof *s);
    const lmc_config *c = &m->cfg;
    const int64_t B = n_batch_max, E = c->n_experts, k = c->n_experts_used, D = c->hidden_size;
    const int64_t I = lmc_moe_expert_size(c, m->profile.arch), Is = lmc_moe_shared_size(c, m->profile.arch);
    s->logits = lmc_tensor_make(LMC_DTYPE_F32, E, B, 1, 1);
    s->ids = lmc_tensor_make(LMC_DTYPE_I32, k, B, 1, 1);
    s->w = lmc_tensor_make(LMC_DTYPE_F32, k, B, 1, 1);
    s->gate = lmc_tensor_make(LMC_DTYPE_F32, I, k * B, 1, 1);
    s->up = lmc_tensor_make(LMC_DTYPE_F32, I, k * B, 1, 1);
    s->eout = lmc_tensor_make(LMC_DTYPE_F32, D, k * B, 1, 1);
    s->sh_gate = lmc_tensor_make(LMC_DTYPE_F32, Is ? Is : 1, B, 1, 1);
    s->sh_up = lmc_tensor_make(LMC_DTYPE_F32, Is ? Is : 1, B, 1, 1);
    s->sh_out = lmc_tensor_make(LMC_DTYPE_F32, D, B, 1, 1);
    s->sh_logit = lmc_tensor_make(LMC_DTYPE_F32, 1, B, 1, 1);
    const int glu = m->profile.arch->moe->glu_clamp;
    s->gate_up = lmc_tensor_make(LMC_DTYPE_F32, glu ? 2 * I : 1, glu ? k * B : 1, 1, 1);
    for (int i = 0; all_tensors(s, i); i++) {
        lmc_status st = m->be->i->alloc(m->be, all_tensors(s, i));
        if (st < 0) {
            lmc_moe_scratch_free(s, m);
            return st;
        }
    }
    return LMC_OK;
}

void lmc_moe_scratch_free(lmc_moe_scratch *s, const lmc_model *m) {
    for (int i = 0; all_tensors(s, i); i++)
        if (all_tensors(s, i)->data) m->be->i->release(m->be, all_tensors(s, i));
}

static void linear(lmc_backend *be, lmc_tensor *y, const lmc_tensor *w, const lmc_tensor *b, const lmc_tensor *x) {
    be->i->matmul(be, y, w, x);
    if (b && b->data) be->i->add_bias(be, y, b);
}

void lmc_moe_forward(const lmc_model *m, const lmc_moe_layer *L, lmc_moe_scratch *s, lmc_tensor *out,
                     const lmc_tensor *h, int n) {
    lmc_backend *be = m->be;
    const lmc_config *c = &m->cfg;
    const int E = c->n_experts, k = c->n_experts_used;
    const lmc_moe_route_op op = lmc_moe_route_params(c, m->profile.arch);
    lmc_tensor logits = lmc_tensor_rows(&s->logits, 0, n), ids = lmc_tensor_rows(&s->ids, 0, n);
    lmc_tensor w = lmc_tensor_rows(&s->w, 0, n);
    lmc_tensor g = lmc_tensor_rows(&s->gate, 0, (int64_t)k * n), u = lmc_tensor_rows(&s->up, 0, (int64_t)k * n);
    lmc_tensor eo = lmc_tensor_rows(&s->eout, 0, (int64_t)k * n);
    /* route */
    be->i->matmul(be, &logits, &L->router, h);
    if (L->router_b.data) be->i->add_bias(be, &logits, &L->router_b);
    be->i->moe_route(be, &ids, &w, &logits, L->sel_bias.data ? &L->sel_bias : NULL, &op);
    /* the selected experts, grouped */
    if (L->gate_up) {
        /* gpt-oss: one interleaved gate/up product, expert biases, the clamped GLU */
        lmc_tensor gu = lmc_tensor_rows(&s->gate_up, 0, (int64_t)k * n);
        be->i->matmul_id(be, &gu, L->gate_up, E, h, &ids);
        be->i->add_bias_id(be, &gu, &L->b_gate_up, &ids);
        be->i->glu_clamp(be, &g, &gu, L->glu_alpha, L->glu_limit);
        be->i->matmul_id(be, &eo, L->down, E, &g, &ids);
        be->i->add_bias_id(be, &eo, &L->b_down, &ids);
        be->i->moe_sum(be, out, &eo, &w, NULL, NULL);
        return;
    }
    if (L->gate && L->b_gate.data) {
        /* gpt-oss with separate gate and up (GGUF): the same GLU over the two halves */
        be->i->matmul_id(be, &g, L->gate, E, h, &ids);
        be->i->add_bias_id(be, &g, &L->b_gate, &ids);
        be->i->matmul_id(be, &u, L->up, E, h, &ids);
        be->i->add_bias_id(be, &u, &L->b_up, &ids);
        be->i->glu_clamp_split(be, &g, &g, &u, L->glu_alpha, L->glu_limit);
        be->i->matmul_id(be, &eo, L->down, E, &g, &ids);
        be->i->add_bias_id(be, &eo, &L->b_down, &ids);
        be->i->moe_sum(be, out, &eo, &w, NULL, NULL);
        return;
    }
    if (L->gate) {
        be->i->matmul_id(be, &g, L->gate, E, h, &ids);
        be->i->matmul_id(be, &u, L->up, E, h, &ids);
        be->i->act_mul(be, &g, &g, &u, m->act);
    } else {
        be->i->matmul_id(be, &g, L->up, E, h, &ids);
        be->i->act(be, &g, &g, m->act);
    }
    be->i->matmul_id(be, &eo, L->down, E, &g, &ids);
    /* shared expert(s), optionally gated */
    lmc_tensor so = lmc_tensor_rows(&s->sh_out, 0, n), sl = lmc_tensor_rows(&s->sh_logit, 0, n);
    const int shared = L->sh_down.data != NULL, gated = L->sh_router.data != NULL;
    if (shared) {
        lmc_tensor sg = lmc_tensor_rows(&s->sh_gate, 0, n), su = lmc_tensor_rows(&s->sh_up, 0, n);
        if (L->sh_gate.data) {
            linear(be, &sg, &L->sh_gate, &L->sh_b_gate, h);
            linear(be, &su, &L->sh_up, &L->sh_b_up, h);
            be->i->act_mul(be, &sg, &sg, &su, m->act);
        } else {
            linear(be, &sg, &L->sh_up, &L->sh_b_up, h);
            be->i->act(be, &sg, &sg, m->act);
        }
        linear(be, &so, &L->sh_down, &L->sh_b_down, &sg);
        if (gated) be->i->matmul(be, &sl, &L->sh_router, h);
    }
    be->i->moe_sum(be, out, &eo, &w, shared ? &so : NULL, shared && gated ? &sl : NULL);
}
