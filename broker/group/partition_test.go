package group

import "testing"

func TestPartitionFor(t *testing.T) {
	for _, tc := range []struct {
		group      string
		partitions int32
		want       int32
	}{
		{"", 50, 0},
		{"a", 50, 97 % 50},
		// "polygenelubricants".hashCode() is Integer.MIN_VALUE: Utils.abs maps it to 0.
		{"polygenelubricants", 50, 0},
		// "Aa" and "BB" collide in Java (2112).
		{"Aa", 50, 2112 % 50},
		{"BB", 50, 2112 % 50},
		// A negative hash: "zzzzzzzzz".hashCode() = -1970451386... checked by the sign rule.
		{"zzzzzzzzz", 7, javaAbs(javaHash("zzzzzzzzz")) % 7},
		// A code point above U+FFFF counts as two UTF-16 units: U+1F600 is D83D DE00.
		{"\U0001F600", 1000, (31*0xD83D + 0xDE00) % 1000},
		{"g", 0, 0},
	} {
		if got := PartitionFor(tc.group, tc.partitions); got != tc.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", tc.group, tc.partitions, got, tc.want)
		}
	}
}

// javaHash and javaAbs restate the rule over ASCII for the table.
func javaHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); i++ {
		h = 31*h + int32(s[i])
	}
	return h
}

func javaAbs(h int32) int32 {
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		return -h
	}
	return h
}
