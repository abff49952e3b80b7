#include "textflag.h"

// hsum reduces the 8 floats of Y reg to one float in the low lane of X reg
// (TMP: a scratch X register).
#define HSUM(Y, X, TMP) \
	VEXTRACTF128 $1, Y, TMP \
	VADDPS       TMP, X, X  \
	VHADDPS      X, X, X    \
	VHADDPS      X, X, X

// SUM4 reduces the accumulators Y0..Y3 and stores them as 4 floats at OUT.
#define SUM4(OUT) \
	HSUM(Y0, X0, X9) \
	HSUM(Y1, X1, X9) \
	HSUM(Y2, X2, X9) \
	HSUM(Y3, X3, X9) \
	VMOVSS X0, 0(OUT) \
	VMOVSS X1, 4(OUT) \
	VMOVSS X2, 8(OUT) \
	VMOVSS X3, 12(OUT)

// func dot4bf16AVX2(a0, a1, a2, a3 *uint16, x *float32, n int, out *[4]float32)
TEXT ·dot4bf16AVX2(SB), NOSPLIT, $0-56
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ a3+24(FP), R10
	MOVQ x+32(FP), DI
	MOVQ n+40(FP), CX
	MOVQ out+48(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop4:
	CMPQ        AX, CX
	JGE         done4
	VMOVUPS     (DI)(AX*4), Y4
	VPMOVZXWD   (SI)(AX*2), Y5
	VPSLLD      $16, Y5, Y5
	VFMADD231PS Y4, Y5, Y0
	VPMOVZXWD   (R8)(AX*2), Y6
	VPSLLD      $16, Y6, Y6
	VFMADD231PS Y4, Y6, Y1
	VPMOVZXWD   (R9)(AX*2), Y7
	VPSLLD      $16, Y7, Y7
	VFMADD231PS Y4, Y7, Y2
	VPMOVZXWD   (R10)(AX*2), Y8
	VPSLLD      $16, Y8, Y8
	VFMADD231PS Y4, Y8, Y3
	ADDQ        $8, AX
	JMP         loop4

done4:
	SUM4(DX)
	VZEROUPPER
	RET

// func dot2x2bf16AVX2(a0, a1 *uint16, b0, b1 *float32, n int, out *[4]float32)
TEXT ·dot2x2bf16AVX2(SB), NOSPLIT, $0-48
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ b0+16(FP), DI
	MOVQ b1+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop2:
	CMPQ        AX, CX
	JGE         done2
	VMOVUPS     (DI)(AX*4), Y4
	VMOVUPS     (R9)(AX*4), Y5
	VPMOVZXWD   (SI)(AX*2), Y6
	VPSLLD      $16, Y6, Y6
	VPMOVZXWD   (R8)(AX*2), Y7
	VPSLLD      $16, Y7, Y7
	VFMADD231PS Y4, Y6, Y0
	VFMADD231PS Y5, Y6, Y1
	VFMADD231PS Y4, Y7, Y2
	VFMADD231PS Y5, Y7, Y3
	ADDQ        $8, AX
	JMP         loop2

done2:
	SUM4(DX)
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *uint16, n int)
// dst[i] = float32 of the bf16 src[i] for the first n elements (a multiple
// of 16): zero-extend to 32 bits and shift into the high half.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loopw:
	CMPQ      AX, CX
	JGE       donew
	VPMOVZXWD (SI)(AX*2), Y0
	VPMOVZXWD 16(SI)(AX*2), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	JMP       loopw

donew:
	VZEROUPPER
	RET

// func dot2x4bf16AVX2(a0, a1 *uint16, b0, b1, b2, b3 *float32, n int, out *[8]float32)
// out = {a0·b0..a0·b3, a1·b0..a1·b3} over the first n elements (a multiple
// of 8), the bf16 weight rows widened as they are loaded.
TEXT ·dot2x4bf16AVX2(SB), NOSPLIT, $0-64
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ b0+16(FP), DI
	MOVQ b1+24(FP), R9
	MOVQ b2+32(FP), R10
	MOVQ b3+40(FP), R11
	MOVQ n+48(FP), CX
	MOVQ out+56(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   AX, AX

loop24b:
	CMPQ        AX, CX
	JGE         done24b
	VPMOVZXWD   (SI)(AX*2), Y8
	VPSLLD      $16, Y8, Y8
	VPMOVZXWD   (R8)(AX*2), Y9
	VPSLLD      $16, Y9, Y9
	VMOVUPS     (DI)(AX*4), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y4
	VMOVUPS     (R9)(AX*4), Y11
	VFMADD231PS Y8, Y11, Y1
	VFMADD231PS Y9, Y11, Y5
	VMOVUPS     (R10)(AX*4), Y12
	VFMADD231PS Y8, Y12, Y2
	VFMADD231PS Y9, Y12, Y6
	VMOVUPS     (R11)(AX*4), Y13
	VFMADD231PS Y8, Y13, Y3
	VFMADD231PS Y9, Y13, Y7
	ADDQ        $8, AX
	JMP         loop24b

done24b:
	HSUM(Y0, X0, X14)
	HSUM(Y1, X1, X14)
	HSUM(Y2, X2, X14)
	HSUM(Y3, X3, X14)
	HSUM(Y4, X4, X14)
	HSUM(Y5, X5, X14)
	HSUM(Y6, X6, X14)
	HSUM(Y7, X7, X14)
	VMOVSS X0, 0(DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VMOVSS X4, 16(DX)
	VMOVSS X5, 20(DX)
	VMOVSS X6, 24(DX)
	VMOVSS X7, 28(DX)
	VZEROUPPER
	RET

// The Go assembler has no AVX512-BF16 mnemonics; VDPBF16PS_Z emits
// VDPBF16PS zmm(dst), zmm(src1), zmm(src2) (Intel operand order;
// EVEX.512.F3.0F38.W0 52 /r, registers 0-31 by number): each float32 lane
// of dst gains the two products of its bf16 pair in src1 and src2.
#define VDPBF16PS_Z(src2, src1, dst) \
	BYTE $0x62; \
	BYTE $(0x02 | ((((dst)>>3)&1)^1)<<7 | ((((src2)>>4)&1)^1)<<6 | ((((src2)>>3)&1)^1)<<5 | ((((dst)>>4)&1)^1)<<4); \
	BYTE $(0x06 | (((src1)&15)^15)<<3); \
	BYTE $(0x40 | ((((src1)>>4)&1)^1)<<3); \
	BYTE $0x52; \
	BYTE $(0xC0 | ((dst)&7)<<3 | ((src2)&7))

// ROW4 multiplies weight row Z(16+r) with the token rows Z20..Z23 into the
// accumulators of row r: token t's is Z(4t+r), the order in which the
// reduction below leaves each sum in lane 4r+t.
#define ROW4(r) \
	VDPBF16PS_Z(20, 16+(r), (r)); \
	VDPBF16PS_Z(21, 16+(r), 4+(r)); \
	VDPBF16PS_Z(22, 16+(r), 8+(r)); \
	VDPBF16PS_Z(23, 16+(r), 12+(r))

// HALF128 adds the 128-bit quarters of A and B into D, picked by the
// shuffle immediates I1 and I2 (D = shuf(A,B,I1) + shuf(A,B,I2)).
#define HALF128(A, B, I1, I2, D) \
	VSHUFF32X4 I1, B, A, Z24 \
	VSHUFF32X4 I2, B, A, Z25 \
	VADDPS     Z25, Z24, D

// func dot4x4bf16AVX512(a0, a1, a2, a3, b0, b1, b2, b3 *uint16, n int, out *[16]float32)
// out[4r+t] = ar·bt over the first n elements (a multiple of 32) of four
// bf16 weight rows and four bf16 token rows: sixteen accumulators, eight
// 64-byte loads per sixteen VDPBF16PS (512 multiply-adds).
TEXT ·dot4x4bf16AVX512(SB), NOSPLIT, $0-80
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ a3+24(FP), R10
	MOVQ b0+32(FP), DI
	MOVQ b1+40(FP), R11
	MOVQ b2+48(FP), R12
	MOVQ b3+56(FP), R13
	MOVQ n+64(FP), CX
	MOVQ out+72(FP), DX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15
	XORQ   AX, AX

loop44:
	CMPQ    AX, CX
	JGE     done44
	VMOVUPS (SI)(AX*2), Z16
	VMOVUPS (R8)(AX*2), Z17
	VMOVUPS (R9)(AX*2), Z18
	VMOVUPS (R10)(AX*2), Z19
	VMOVUPS (DI)(AX*2), Z20
	VMOVUPS (R11)(AX*2), Z21
	VMOVUPS (R12)(AX*2), Z22
	VMOVUPS (R13)(AX*2), Z23
	ROW4(0)
	ROW4(1)
	ROW4(2)
	ROW4(3)
	ADDQ    $32, AX
	JMP     loop44

done44:
	// A transpose-and-add tree: 16 accumulators of 16 lanes become one
	// register whose lane i is accumulator i's sum (45 instructions, where
	// reducing each alone took 7 apiece). 1: pairs keep 8 lanes each.
	HALF128(Z0, Z1, $0x44, $0xEE, Z16)
	HALF128(Z2, Z3, $0x44, $0xEE, Z17)
	HALF128(Z4, Z5, $0x44, $0xEE, Z18)
	HALF128(Z6, Z7, $0x44, $0xEE, Z19)
	HALF128(Z8, Z9, $0x44, $0xEE, Z20)
	HALF128(Z10, Z11, $0x44, $0xEE, Z21)
	HALF128(Z12, Z13, $0x44, $0xEE, Z22)
	HALF128(Z14, Z15, $0x44, $0xEE, Z23)
	// 2: four lanes each, one accumulator per 128-bit quarter.
	HALF128(Z16, Z17, $0x88, $0xDD, Z0)
	HALF128(Z18, Z19, $0x88, $0xDD, Z1)
	HALF128(Z20, Z21, $0x88, $0xDD, Z2)
	HALF128(Z22, Z23, $0x88, $0xDD, Z3)
	// 3: two lanes each (64-bit halves of each quarter).
	VUNPCKLPD Z1, Z0, Z24
	VUNPCKHPD Z1, Z0, Z25
	VADDPS    Z25, Z24, Z4
	VUNPCKLPD Z3, Z2, Z24
	VUNPCKHPD Z3, Z2, Z25
	VADDPS    Z25, Z24, Z5
	// 4: one lane each.
	VSHUFPS   $0x88, Z5, Z4, Z24
	VSHUFPS   $0xDD, Z5, Z4, Z25
	VADDPS    Z25, Z24, Z6
	VMOVUPS   Z6, (DX)
	VZEROUPPER
	RET
