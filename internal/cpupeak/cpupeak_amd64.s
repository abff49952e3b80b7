#include "textflag.h"

// func fmaLoop(iters int) float32
// Twelve accumulators hide the FMA latency (4-5 cycles) behind two FMA
// units; the multiplicands (ones) stay in Y12 and Y13.
TEXT ·fmaLoop(SB), NOSPLIT, $0-12
	MOVQ         iters+0(FP), CX
	MOVL         $0x3f800000, AX // 1.0
	VMOVD        AX, X12
	VBROADCASTSS X12, Y12
	VMOVAPS      Y12, Y13
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2
	VXORPS       Y3, Y3, Y3
	VXORPS       Y4, Y4, Y4
	VXORPS       Y5, Y5, Y5
	VXORPS       Y6, Y6, Y6
	VXORPS       Y7, Y7, Y7
	VXORPS       Y8, Y8, Y8
	VXORPS       Y9, Y9, Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11

loop:
	TESTQ       CX, CX
	JZ          done
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ        CX
	JMP         loop

done:
	VMOVSS     X0, ret+8(FP)
	VZEROUPPER
	RET

// DPZ emits VDPBF16PS zmm(dst), Z30, Z31 for dst 0-15 (the Go assembler has
// no AVX512-BF16 mnemonics; EVEX.512.F3.0F38.W0 52 /r).
#define DPZ(dst) \
	BYTE $0x62; \
	BYTE $(0x12 | ((((dst)>>3)&1)^1)<<7); \
	BYTE $0x0E; \
	BYTE $0x40; \
	BYTE $0x52; \
	BYTE $(0xC7 | ((dst)&7)<<3)

// func bf16DotLoop(iters int) float32
// Twelve accumulators of 16 lanes; Z30 and Z31 hold bf16 ones in pairs.
TEXT ·bf16DotLoop(SB), NOSPLIT, $0-12
	MOVQ         iters+0(FP), CX
	MOVL         $0x3f803f80, AX // two bf16 1.0
	VPBROADCASTD AX, Z30
	VMOVAPS      Z30, Z31
	VXORPS       Z0, Z0, Z0
	VXORPS       Z1, Z1, Z1
	VXORPS       Z2, Z2, Z2
	VXORPS       Z3, Z3, Z3
	VXORPS       Z4, Z4, Z4
	VXORPS       Z5, Z5, Z5
	VXORPS       Z6, Z6, Z6
	VXORPS       Z7, Z7, Z7
	VXORPS       Z8, Z8, Z8
	VXORPS       Z9, Z9, Z9
	VXORPS       Z10, Z10, Z10
	VXORPS       Z11, Z11, Z11

loopbf:
	TESTQ CX, CX
	JZ    donebf
	DPZ(0)
	DPZ(1)
	DPZ(2)
	DPZ(3)
	DPZ(4)
	DPZ(5)
	DPZ(6)
	DPZ(7)
	DPZ(8)
	DPZ(9)
	DPZ(10)
	DPZ(11)
	DECQ  CX
	JMP   loopbf

donebf:
	VMOVSS     X0, ret+8(FP)
	VZEROUPPER
	RET
