package arena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// Transport is how tensor bytes travel between processes.
type Transport string

const (
	// TransportArena stages tensors in shared, persistently mapped segments.
	TransportArena Transport = "arena"
	// TransportFile writes one file per tensor: the baseline the arena
	// replaces, and what a spilled tensor uses.
	TransportFile Transport = "file"
)

// ParseTransport parses "arena" or "file".
func ParseTransport(s string) (Transport, error) {
	switch Transport(s) {
	case TransportArena, TransportFile:
		return Transport(s), nil
	}
	return "", fmt.Errorf("transport %q: want %q or %q", s, TransportArena, TransportFile)
}

// Location says where a described tensor's bytes are.
type Location uint8

const (
	InSegment Location = 1 // a slot of a shared segment
	InFile    Location = 2 // a per-tensor file (spilled, or the file transport)
)

func (l Location) String() string {
	switch l {
	case InSegment:
		return "segment"
	case InFile:
		return "file"
	}
	return fmt.Sprintf("location(%d)", l)
}

// Descriptor tells a consumer where a tensor is. It is all that crosses the
// control channel; the consumer validates it before touching any memory.
type Descriptor struct {
	ID          uint64   // the producer's key for the tensor; ACKs name it
	Loc         Location //
	File        string   // segment or spill-file name (never a path)
	Offset      int64    // byte offset in the segment; 0 for a file
	Size        int64    // payload bytes
	DType       string   // element type, one of DTypes
	Shape       []int64  // empty: a flat byte payload
	Checksum    uint32   // CRC-32C of the payload, when HasChecksum
	HasChecksum bool
}

// DTypes maps the element types a descriptor may name to their sizes.
var DTypes = map[string]int64{
	"uint8": 1, "int8": 1, "bool": 1,
	"bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
	"float32": 4, "int32": 4, "uint32": 4,
	"float64": 8, "int64": 8, "uint64": 8,
}

const maxDims = 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of b, the checksum descriptors carry.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ErrChecksum reports a payload that does not match its descriptor.
var ErrChecksum = errors.New("checksum mismatch")

// Verify checks data against the descriptor's checksum, if it has one.
func (d Descriptor) Verify(data []byte) error {
	if int64(len(data)) != d.Size {
		return fmt.Errorf("tensor %d: %d bytes, descriptor says %d", d.ID, len(data), d.Size)
	}
	if d.HasChecksum {
		if got := Checksum(data); got != d.Checksum {
			return fmt.Errorf("tensor %d: crc32c %08x, descriptor says %08x: %w", d.ID, got, d.Checksum, ErrChecksum)
		}
	}
	return nil
}

// Validate checks everything about a descriptor that needs no file: the
// name, the ranges, the element type and shape. Bounds against the real
// segment are checked again when it is mapped.
func (d Descriptor) Validate() error {
	if err := d.validateName(); err != nil {
		return err
	}
	return d.validateLayout()
}

func (d *Descriptor) refuse(format string, a ...any) error {
	return fmt.Errorf("descriptor for tensor %d refused: "+format, append([]any{d.ID}, a...)...)
}

// validateName checks the file name and that it fits the location.
func (d *Descriptor) validateName() error {
	bad := d.refuse
	n, err := ParseName(d.File)
	if err != nil {
		return bad("%v", err)
	}
	switch d.Loc {
	case InSegment:
		if n.Kind != KindSegment {
			return bad("location segment but %q names a spill file", d.File)
		}
	case InFile:
		if n.Kind != KindSpill {
			return bad("location file but %q names a segment", d.File)
		}
		if d.Offset != 0 {
			return bad("offset %d into a per-tensor file (want 0)", d.Offset)
		}
	default:
		return bad("unknown location %d", d.Loc)
	}
	return nil
}

// validateLayout checks the ranges, element type and shape.
func (d *Descriptor) validateLayout() error {
	bad := d.refuse
	if d.Loc != InSegment && d.Loc != InFile {
		return bad("unknown location %d", d.Loc)
	}
	if d.Loc == InFile && d.Offset != 0 {
		return bad("offset %d into a per-tensor file (want 0)", d.Offset)
	}
	if d.Offset < 0 || d.Size < 0 {
		return bad("negative offset %d or size %d", d.Offset, d.Size)
	}
	if d.Offset > math.MaxInt64-d.Size {
		return bad("offset %d + size %d overflows", d.Offset, d.Size)
	}
	es, ok := DTypes[d.DType]
	if !ok {
		return bad("unknown dtype %q", clip(d.DType))
	}
	if len(d.Shape) > maxDims {
		return bad("%d dimensions (at most %d)", len(d.Shape), maxDims)
	}
	if len(d.Shape) > 0 {
		elems := int64(1)
		for _, s := range d.Shape {
			hi, lo := bits.Mul64(uint64(elems), uint64(s))
			if s < 0 || hi != 0 || lo > math.MaxInt64 {
				return bad("shape %v is negative or overflows", d.Shape)
			}
			elems = int64(lo)
		}
		if hi, lo := bits.Mul64(uint64(elems), uint64(es)); hi != 0 || int64(lo) != d.Size {
			return bad("shape %v of %s is %d elements of %d bytes, but size is %d", d.Shape, d.DType, elems, es, d.Size)
		}
	} else if d.Size%es != 0 {
		return bad("size %d is not a multiple of %s's %d bytes", d.Size, d.DType, es)
	}
	return nil
}

// appendDescriptor encodes d in the control channel's binary form.
func appendDescriptor(b []byte, d *Descriptor) []byte {
	b = binary.LittleEndian.AppendUint64(b, d.ID)
	flags := byte(0)
	if d.HasChecksum {
		flags = 1
	}
	b = append(b, byte(d.Loc), flags)
	b = appendString(b, d.File)
	b = binary.LittleEndian.AppendUint64(b, uint64(d.Offset))
	b = binary.LittleEndian.AppendUint64(b, uint64(d.Size))
	b = appendString(b, d.DType)
	b = append(b, byte(len(d.Shape)))
	for _, s := range d.Shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(s))
	}
	return binary.LittleEndian.AppendUint32(b, d.Checksum)
}

func appendString(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

var errShort = errors.New("truncated")

// decoder reads the binary form; every read is bounds-checked, so hostile
// bytes produce an error, never a panic or an oversized allocation.
type decoder struct {
	b   []byte
	err error
}

func (r *decoder) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *decoder) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *decoder) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *decoder) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *decoder) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *decoder) str() string { return string(r.take(int(r.u8()))) }

func (r *decoder) descriptor() Descriptor {
	var d Descriptor
	d.ID = r.u64()
	d.Loc = Location(r.u8())
	d.HasChecksum = r.u8()&1 != 0
	d.File = r.str()
	d.Offset = int64(r.u64())
	d.Size = int64(r.u64())
	d.DType = r.str()
	nd := int(r.u8())
	if nd > maxDims {
		r.err = fmt.Errorf("%d dimensions (at most %d)", nd, maxDims)
		return d
	}
	if nd > 0 {
		d.Shape = make([]int64, nd)
		for i := range d.Shape {
			d.Shape[i] = int64(r.u64())
		}
	}
	d.Checksum = r.u32()
	return d
}
