#version 450
// tx_embed.comp - the embedding lookup and its backward (src/core/reference_tx.c), one source built three
// ways (vulkan.cmake):
//   EMB_FWD:   out[i,c] = wte[tok[i], c] + wpe[p, c] for the rows i of this dispatch whose token lies in the
//              bound window of wte rows [v0, v0 + nv) (the lane dispatches once per window of a table larger
//              than a binding: every out element is written by exactly one window).
//   EMB_LINKS: one invocation per position i of the whole batch: links[i] = the next position j > i with the
//              same table row (-1 if none), links[n + i] = 1 if i is the first position of its row.
//   EMB_BWD:   one invocation per (first position of a row, channel): walks that row's positions through the
//              links, ascending, dtab[row, c] = dtab[row, c] + dout[j, c] for each - the reference's order
//              for every table row, with no atomics; rows outside the bound window [v0, v0 + nv) are left to
//              the dispatch of their window.
// The row of position i: tok[i] / pos[i] when flags & 1, else the implicit position (bt0 + i) % T.
#include "common.glsl"

layout(local_size_x = 256) in;

#if defined(EMB_FWD)
layout(set = 0, binding = 0) readonly buffer Tok { int tok[]; };
layout(set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(set = 0, binding = 2) readonly buffer Wte { float wte[]; };
layout(set = 0, binding = 3) readonly buffer Wpe { float wpe[]; };
layout(set = 0, binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform P {
  uint n, T, C;
  uint flags; // 1: pos given (else p = (bt0 + i) % T)
  uint bt0, v0, nv;
  uint base_tok, base_pos, base_wte, base_wpe, base_out;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u, count = pc.n * pc.C;
  for (uint e = gl_GlobalInvocationID.x; e < count; e += stride) {
    uint i = e / pc.C, c = e % pc.C;
    uint v = uint(tok[pc.base_tok + i]);
    if (v < pc.v0 || v - pc.v0 >= pc.nv) continue;
    uint p = (pc.flags & 1u) != 0u ? uint(pos[pc.base_pos + i]) : (pc.bt0 + i) % pc.T;
    o[pc.base_out + i * pc.C + c] = weft_canon(weft_add(wte[pc.base_wte + (v - pc.v0) * pc.C + c], wpe[pc.base_wpe + p * pc.C + c]));
  }
}
#elif defined(EMB_LINKS)
layout(set = 0, binding = 0) readonly buffer Idx { int idx[]; };
layout(set = 0, binding = 1) writeonly buffer Links { int links[]; };
layout(push_constant) uniform P {
  uint n, T;
  uint flags; // 1: idx given (else (i % T))
  uint base_idx, base_links;
} pc;

uint row_of(uint i) { return (pc.flags & 1u) != 0u ? uint(idx[pc.base_idx + i]) : i % pc.T; }

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    uint v = row_of(i);
    int next = -1;
    for (uint j = i + 1u; j < pc.n; j++)
      if (row_of(j) == v) {
        next = int(j);
        break;
      }
    int head = 1;
    for (uint j = 0u; j < i; j++)
      if (row_of(j) == v) {
        head = 0;
        break;
      }
    links[pc.base_links + i] = next;
    links[pc.base_links + pc.n + i] = head;
  }
}
#elif defined(EMB_BWD)
layout(set = 0, binding = 0) readonly buffer Idx { int idx[]; };
layout(set = 0, binding = 1) readonly buffer Links { int links[]; };
layout(set = 0, binding = 2) readonly buffer Dout { float dout[]; };
layout(set = 0, binding = 3) buffer Tab { float tab[]; };
layout(push_constant) uniform P {
  uint n, T, C;
  uint flags; // 1: idx given (else (i % T))
  uint v0, nv;
  uint base_idx, base_links, base_dout, base_tab;
} pc;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u, count = pc.n * pc.C;
  for (uint e = gl_GlobalInvocationID.x; e < count; e += stride) {
    uint i = e / pc.C, c = e % pc.C;
    if (links[pc.base_links + pc.n + i] == 0) continue; // not the first position of its row
    uint v = (pc.flags & 1u) != 0u ? uint(idx[pc.base_idx + i]) : i % pc.T;
    if (v < pc.v0 || v - pc.v0 >= pc.nv) continue;
    uint at = pc.base_tab + (v - pc.v0) * pc.C + c;
    float acc = tab[at];
    for (int j = int(i); j >= 0; j = links[pc.base_links + uint(j)])
      acc = weft_canon(weft_add(acc, dout[pc.base_dout + uint(j) * pc.C + c]));
    tab[at] = acc;
  }
}
#else
#error tx_embed.comp: define EMB_FWD, EMB_LINKS or EMB_BWD
#endif
