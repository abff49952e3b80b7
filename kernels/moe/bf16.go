package moe

import "math"

// F32ToBF16 rounds f to the nearest bf16 (ties to even), as the GPU's
// cvt.rn.bf16.f32 does; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bf16 to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 returns f rounded to bf16 precision, as a float32.
func RoundBF16(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }

// ToBF16 converts a float32 slice to bf16 bits.
func ToBF16(dst []uint16, src []float32) {
	for i, v := range src[:len(dst)] {
		dst[i] = F32ToBF16(v)
	}
}

// FromBF16 widens bf16 bits into dst.
func FromBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	i := 0
	if n16 := len(dst) &^ 15; useAVX2 && n16 > 0 {
		widenBF16AVX2(&dst[0], &src[0], n16)
		i = n16
	}
	for ; i < len(dst); i++ {
		dst[i] = BF16ToF32(src[i])
	}
}

// BF16NaN is the bit pattern mstar poisons output buffers with before a
// correctness check: a quiet NaN, so an element nothing wrote shows up.
const BF16NaN uint16 = 0x7fc1
