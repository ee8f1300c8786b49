"""The Go program's format, with no Django: keys, messages, times, CBOR and its JSON form."""
