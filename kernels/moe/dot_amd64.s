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
