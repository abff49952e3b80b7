package main

import "strconv"

// plural is "1 line", "2 lines": counts in messages read as English.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
