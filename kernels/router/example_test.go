package router_test

import (
	"fmt"

	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/kernels/routing"
)

// leastLoaded is a user-defined router: each token takes the expert with
// the best logit after a penalty for every token the expert already holds
// in this batch, so a hot expert sheds tokens to its runners-up. It is
// stateless across calls (the counts live only inside one Route).
type leastLoaded struct{ penalty float32 }

func (leastLoaded) Name() string { return "least-loaded" }

func (r leastLoaded) Route(in router.Input, _ router.State) (routing.Routing, router.State, error) {
	out := routing.New(in.T, in.K)
	held := make([]int, in.E)
	for t := 0; t < in.T; t++ {
		logits := in.Logits[t*in.E : (t+1)*in.E]
		for j := 0; j < in.K; j++ {
			best := -1
			var bestScore float32
			for e, l := range logits {
				if taken(out.IDs[t*in.K:t*in.K+j], e) {
					continue
				}
				s := l - r.penalty*float32(held[e])
				if best < 0 || s > bestScore { // ties: the lower id, as the built-ins do
					best, bestScore = e, s
				}
			}
			held[best]++
			out.IDs[t*in.K+j] = int32(best)
			out.Weights[t*in.K+j] = 1 / float32(in.K)
		}
	}
	return out, nil, nil
}

func taken(ids []int32, e int) bool {
	for _, id := range ids {
		if int(id) == e {
			return true
		}
	}
	return false
}

// Registering makes the router reachable by name, from router.New and so
// from the mstar commands of a build that imports this package.
func init() {
	router.Register("least-loaded", "softmax-free top-k with a per-token load penalty",
		func(c router.Config) (router.Router, error) { return leastLoaded{penalty: 0.5}, nil })
}

// A router is anything with Name and Route; Drive checks what it returns
// (ids in range, no expert twice per token) and threads state through layers.
func ExampleRouter() {
	r, err := router.New("least-loaded", router.Config{})
	if err != nil {
		panic(err)
	}
	// Four tokens that all prefer expert 0 a little over expert 1.
	in := router.Input{T: 4, E: 2, K: 1, Logits: []float32{
		1, 0.8,
		1, 0.8,
		1, 0.8,
		1, 0.8,
	}}
	outs, _, err := router.Drive(r, []router.Input{in}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("ids:  ", outs[0].IDs)
	fmt.Println("loads:", outs[0].Loads(in.E))
	// Output:
	// ids:   [0 1 0 1]
	// loads: [2 2]
}
