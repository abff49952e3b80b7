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

// ROW4 multiplies weight row Z(16+r) into the four token accumulators of
// row r (Z(4r)..Z(4r+3)) with the token rows Z20..Z23.
#define ROW4(r) \
	VDPBF16PS_Z(20, 16+(r), 4*(r)); \
	VDPBF16PS_Z(21, 16+(r), 4*(r)+1); \
	VDPBF16PS_Z(22, 16+(r), 4*(r)+2); \
	VDPBF16PS_Z(23, 16+(r), 4*(r)+3)

// ZSUM reduces the 16 floats of Z reg (Y and X name the same register) into
// the float at OFF(DX); the scratch registers are EVEX-only (Y24, X25), so
// the halving steps use EVEX forms and the last two the VEX VHADDPS.
#define ZSUM(Z, Y, X, OFF) \
	VEXTRACTF64X4 $1, Z, Y24 \
	VADDPS        Y24, Y, Y  \
	VEXTRACTF32X4 $1, Y, X25 \
	VADDPS        X25, X, X  \
	VHADDPS       X, X, X    \
	VHADDPS       X, X, X    \
	VMOVSS        X, OFF(DX)

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
	ZSUM(Z0, Y0, X0, 0)
	ZSUM(Z1, Y1, X1, 4)
	ZSUM(Z2, Y2, X2, 8)
	ZSUM(Z3, Y3, X3, 12)
	ZSUM(Z4, Y4, X4, 16)
	ZSUM(Z5, Y5, X5, 20)
	ZSUM(Z6, Y6, X6, 24)
	ZSUM(Z7, Y7, X7, 28)
	ZSUM(Z8, Y8, X8, 32)
	ZSUM(Z9, Y9, X9, 36)
	ZSUM(Z10, Y10, X10, 40)
	ZSUM(Z11, Y11, X11, 44)
	ZSUM(Z12, Y12, X12, 48)
	ZSUM(Z13, Y13, X13, 52)
	ZSUM(Z14, Y14, X14, 56)
	ZSUM(Z15, Y15, X15, 60)
	VZEROUPPER
	RET
