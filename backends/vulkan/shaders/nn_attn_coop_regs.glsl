// nn_attn_coop_regs.glsl - main() of nn_attn_coop.glsl with REGS defined:
// the online softmax on the score accumulators themselves, in registers
// (FlashAttention-2's arrangement), instead of a round trip of S and P
// through shared memory.
//
// Each invocation learns the row and column of each of its accumulator
// components once (matrices loaded from tables of row and column numbers;
// every 16 x 16 f32 matrix has the same layout).  NVIDIA's layout puts
// rows g and g + 8 in the 4 invocations 4g..4g+3 (g = lane / 4), so a row
// maximum or sum is a reduction over the invocation's own components and
// two shuffles within its quad.  The layout is checked at the start: on a
// device that distributes components otherwise, the kernel writes NaN (the
// host picks it only for NVIDIA's driver; the tests would show it).  P is
// the score matrix converted to f16 (a conversion between matrices of the
// same shape keeps each element's position), which is the A operand of
// O += P V; O's rows are scaled by the factor of the component's row.
// Shared memory holds only the K or V tile (and Q at the start, O at the
// end): 17 KiB at HD = 128.  Measured on an H100 and dropped
// (docs/VULKAN.md): 8 subgroups (128 queries a workgroup), K and V in
// separate buffers with 2 barriers per key block instead of 4, the next K
// tile's loads issued a block early, Q re-read from shared memory each
// key block instead of held in registers.

void main()
{
    int t = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID), g4 = lane >> 2;

    // the row and column of each accumulator component
    if (t < 128) {                          // two tables of 16 rows of 4 uvec4
        int x = t & 63, c4 = (x & 3) * 4;
        KV[t] = t < 64 ? uvec4(floatBitsToUint(float(x >> 2))) : floatBitsToUint(vec4(c4, c4 + 1, c4 + 2, c4 + 3));
    }
    barrier();
    F32M rm, cm;
    coopMatLoadNV(rm, KV, 0, 4, false);
    coopMatLoadNV(cm, KV, 64, 4, false);
    int rows[NC], cols[NC];
    bool hi[NC];                            // on row g4 + 8 (else g4)
    bool ok = true;
    [[unroll]] for (int i = 0; i < NC; i++) {
        rows[i] = int(rm[i]);
        cols[i] = int(cm[i]);
        hi[i] = rows[i] == g4 + 8;
        ok = ok && (rows[i] == g4 || hi[i]);
    }
    ok = subgroupAll(ok);

    uint bhn = pc.items / uint(pc.nqb);
    for (uint w = gl_WorkGroupID.x; w < pc.items; w += gl_NumWorkGroups.x) {
        ATTN_ITEM(w);
        int q0 = i0 + sg * 16;              // this subgroup's first query

        // Q, 64 rows at a time through KV (rows past bq zero)
        F16M qf[NF];
        uvec4 g[NL];
        [[unroll]] for (int p = 0; p < BQ / BK; p++) {
            [[unroll]] for (int u = 0; u < NL; u++) {
                int x = t + u * NT, row = p * BK + x / CPR, c = x % CPR;
                g[u] = row < bq ? q8.v[(qb + row * pc.sq[2] + c * 8) >> 3] : uvec4(0u);
            }
            barrier();   // KV's last readers are done
            put(g);
            barrier();
            if (sg * 16 / BK == p)
                [[unroll]] for (int c = 0; c < NF; c++)
                    coopMatLoadNV(qf[c], KV, (sg * 16 - p * BK) * KS + c * 2, KS, false);
        }
        if (kend > 0) fetch_k(kb, pc.sk[2], min(BK, kend), g);

        F32M o[NF];
        [[unroll]] for (int c = 0; c < NF; c++) o[c] = F32M(0.0);
        vec2 m = vec2(M_NINF), l = vec2(0.0);     // rows g4 and g4 + 8 (l: this invocation's part)
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = min(BK, kend - j0);
            bool more = j0 + BK < kend;
            barrier();   // Q's or the last V's readers are done
            put(g);
            barrier();
            fetch_v(vb + j0 * pc.sv[2], pc.sv[2], nk, g);

            F32M s[4];
            QK_SCORES(s, qf);

            // scale, mask, row maxima over the quad
            vec2 mb = vec2(M_NINF);
            [[unroll]] for (int j = 0; j < 4; j++)
                [[unroll]] for (int i = 0; i < NC; i++) {
                    int key = j * 16 + cols[i];
                    float x = s[j][i] * pc.scale;
                    if (key >= nk || (pc.causal != 0u && j0 + key > q0 + rows[i])) x = M_NINF;
                    s[j][i] = x;
                    if (hi[i]) mb.y = nmax(mb.y, x);
                    else mb.x = nmax(mb.x, x);
                }
            [[unroll]] for (int d = 1; d <= 2; d *= 2) {
                mb.x = nmax(mb.x, subgroupShuffleXor(mb.x, d));
                mb.y = nmax(mb.y, subgroupShuffleXor(mb.y, d));
            }
            vec2 mn = vec2(nmax(m.x, mb.x), nmax(m.y, mb.y)), f = vec2(1.0);
            bvec2 any = notEqual(mn, vec2(M_NINF));   // else nothing visible yet: the block adds nothing
            if (any.x) f.x = m.x == M_NINF ? 0.0 : exp2(m.x - mn.x);
            if (any.y) f.y = m.y == M_NINF ? 0.0 : exp2(m.y - mn.y);
            vec2 ps = vec2(0.0);
            F16M pf[4];
            [[unroll]] for (int j = 0; j < 4; j++) {
                [[unroll]] for (int i = 0; i < NC; i++) {
                    float p = 0.0;
                    if (hi[i]) {
                        if (any.y) p = exp2(s[j][i] - mn.y);
                        ps.y += p;
                    } else {
                        if (any.x) p = exp2(s[j][i] - mn.x);
                        ps.x += p;
                    }
                    s[j][i] = p;
                }
                pf[j] = F16M(s[j]);
            }
            l = l * f + ps;
            m = mn;
            [[unroll]] for (int i = 0; i < NC; i++) {
                float fi = hi[i] ? f.y : f.x;
                [[unroll]] for (int c = 0; c < NF; c++) o[c][i] *= fi;
            }

            barrier();   // K's readers are done
            put(g);
            barrier();
            if (more) fetch_k(kb + (j0 + BK) * pc.sk[2], pc.sk[2], min(BK, kend - j0 - BK), g);
            ADD_PV(o, pf);
        }

        // O / l (l summed over the quad; 0 where no key was visible, which
        // gives NaN as on the CPU), out through KV (64 uvec4 a subgroup)
        [[unroll]] for (int d = 1; d <= 2; d *= 2) {
            l.x += subgroupShuffleXor(l.x, d);
            l.y += subgroupShuffleXor(l.y, d);
        }
        vec2 inv = vec2(l.x > 0.0 && ok ? 1.0 / l.x : M_NAN, l.y > 0.0 && ok ? 1.0 / l.y : M_NAN);
        [[unroll]] for (int i = 0; i < NC; i++) {
            float fi = hi[i] ? inv.y : inv.x;
            [[unroll]] for (int c = 0; c < NF; c++) o[c][i] *= fi;
        }
        int ob = (bh * pc.Lq + q0) * HD, nrow = min(16, bq - sg * 16), sb = sg * 64;
        barrier();   // the last V's readers are done
        [[unroll]] for (int c = 0; c < NF; c++) {
            coopMatStoreNV(o[c], KV, sb, 4, false);
            sg_barrier();
            [[unroll]] for (int k = 0; k < 8; k++) {
                int e = lane + 32 * k, row = e >> 4, col = e & 15;
                if (row < nrow) stf_3(DTO, ob + row * HD + c * 16 + col, uintBitsToFloat(KV[sb + (e >> 2)][e & 3]));
            }
            sg_barrier();
        }
    }
}
