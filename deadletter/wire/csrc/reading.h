/*
 * Reading a message: a map cbor2 decoded (go_message) or a per-message row's
 * bytes walked here (go_decode), built into a Message when it has Go's shape.
 *
 * Part of deadletter.wire._speedups: included once, in order, by _speedups.c,
 * which holds the shared state; not compiled on its own.
 */

/* A time field: None stays None; Go's canonical text becomes a GoTime. Sets
 * *result to NULL when the Python path must judge the value, returns -1 on
 * an exception. */
static int
read_time_field(PyObject *raw, PyObject **result)
{
    GoClock clock;

    if (raw == Py_None) {
        *result = Py_NewRef(Py_None);
        return 0;
    }
    if (!read_time(raw, &clock)) {
        *result = NULL;
        return 0;
    }
    *result = new_time(raw, &clock);
    return *result == NULL ? -1 : 0;
}


PyDoc_STRVAR(go_message_doc,
"go_message(item) -> Message | None\n\n"
"The Message of one decoded CBOR map when it has exactly the shape Go writes;\n"
"None for anything else, which the Python code then reads.");

/* The Message of Go's eight field values (borrowed, in Go's order) and the
 * unknown keys' `extra` (a new dict, which this takes over); None when a
 * value is not of Go's shape. */
static PyObject *
build_message(PyObject *const *values, PyObject *extra)
{
    PyObject *timestamp = NULL, *queued_at = NULL, *code, *fields = NULL, *message = NULL;
    long long code_value;
    int overflow;

    if (!PyUnicode_CheckExact(values[2]) || !PyUnicode_CheckExact(values[3])
        || !is_list_of(values[4], is_str) || !is_list_of(values[5], is_str)
        || !is_list_of(values[6], is_str)
        || !PyLong_CheckExact(values[7])) {
        Py_DECREF(extra);
        Py_RETURN_NONE;
    }
    code_value = PyLong_AsLongLongAndOverflow(values[7], &overflow);
    if (code_value == -1 && PyErr_Occurred()) {
        Py_DECREF(extra);
        return NULL;
    }
    if (overflow) {
        Py_DECREF(extra);
        Py_RETURN_NONE;
    }
    if (read_time_field(values[0], &timestamp) < 0) {
        goto done;
    }
    if (timestamp == NULL) {
        message = Py_NewRef(Py_None);
        goto done;
    }
    if (read_time_field(values[1], &queued_at) < 0) {
        goto done;
    }
    if (queued_at == NULL) {
        message = Py_NewRef(Py_None);
        goto done;
    }
    code = PyDict_GetItemWithError(event_codes, values[7]);
    if (code == NULL) {
        if (PyErr_Occurred()) {
            goto done;
        }
        code = values[7];
    }
    fields = PyDict_Copy(fields_template);  /* sized for its keys: no resizing below */
    if (fields == NULL
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 0), timestamp) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 1), queued_at) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 2), values[2]) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 3), values[3]) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 4), values[4]) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 5), values[5]) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 6), values[6]) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 7), code) < 0
        || PyDict_SetItem(fields, PyTuple_GET_ITEM(attributes, 8), extra) < 0) {
        goto done;
    }
    message = ((PyTypeObject *)message_type)->tp_alloc((PyTypeObject *)message_type, 0);
    if (message != NULL && PyObject_SetAttr(message, dict_name, fields) < 0) {
        Py_CLEAR(message);
    }
done:
    Py_XDECREF(timestamp);
    Py_XDECREF(queued_at);
    Py_DECREF(extra);
    Py_XDECREF(fields);
    return message;
}

static PyObject *
go_message(PyObject *module, PyObject *item)
{
    PyObject *values[FIELD_COUNT], *key, *value, *expected, *extra;
    Py_ssize_t position = 0, index = 0, fields_end = 0;

    if (!is_configured()) {
        return NULL;
    }
    if (!PyDict_CheckExact(item) || PyDict_GET_SIZE(item) < FIELD_COUNT) {
        Py_RETURN_NONE;
    }
    /* Go's eight keys in order, then (a user's message) keys of its own. */
    while (PyDict_Next(item, &position, &key, &value)) {
        if (index < FIELD_COUNT) {
            expected = PyTuple_GET_ITEM(go_keys, index);
            if (key != expected && !same_ascii(key, expected)) {
                Py_RETURN_NONE;
            }
            values[index++] = value;
            fields_end = position;
        }
        else if (!is_extra_key(key)) {
            Py_RETURN_NONE;
        }
    }
    extra = PyDict_New();
    if (extra == NULL) {
        return NULL;
    }
    position = fields_end;
    while (PyDict_Next(item, &position, &key, &value)) {
        if (PyDict_SetItem(extra, key, value) < 0) {
            Py_DECREF(extra);
            return NULL;
        }
    }
    return build_message(values, extra);
}


/* --- reading row bytes ------------------------------------------------- */

/* A walk over one row value. `bail` says "not a shape read here": the Python
 * code (cbor2 and then go_message or the general reading) takes the value. */
typedef struct {
    const unsigned char *at;
    const unsigned char *end;
    int bail;
} Reader;

/* One item head: major type, additional info and argument. Indefinite
 * lengths, reserved values and truncation bail. */
static int
read_head(Reader *reader, int *major, int *info, uint64_t *argument)
{
    int width = 0, byte;
    uint64_t value = 0;

    if (reader->at >= reader->end) {
        reader->bail = 1;
        return 0;
    }
    *major = *reader->at >> 5;
    *info = *reader->at & 0x1f;
    reader->at++;
    if (*info < 24) {
        *argument = (uint64_t)*info;
        return 1;
    }
    switch (*info) {
    case 24: width = 1; break;
    case 25: width = 2; break;
    case 26: width = 4; break;
    case 27: width = 8; break;
    default:
        reader->bail = 1;
        return 0;
    }
    if (reader->end - reader->at < width) {
        reader->bail = 1;
        return 0;
    }
    for (byte = 0; byte < width; byte++) {
        value = (value << 8) | reader->at[byte];
    }
    reader->at += width;
    *argument = value;
    return 1;
}

/* `length` bytes of a string's content, or NULL (bail) when fewer are left. */
static const char *
take(Reader *reader, uint64_t length)
{
    const unsigned char *start = reader->at;

    if ((uint64_t)(reader->end - reader->at) < length) {
        reader->bail = 1;
        return NULL;
    }
    reader->at += length;
    return (const char *)start;
}

/* A UTF-8 text of `length` bytes; text that is not UTF-8 bails (cbor2 then refuses it). */
static PyObject *
read_text(Reader *reader, uint64_t length)
{
    const char *data = take(reader, length);
    PyObject *text;

    if (data == NULL) {
        return NULL;
    }
    text = PyUnicode_DecodeUTF8(data, (Py_ssize_t)length, NULL);
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        reader->bail = 1;
    }
    return text;
}

/* The float of a half, single or double's bits, as cbor2 reads it. */
static PyObject *
read_float(int info, uint64_t bits)
{
    unsigned char bytes[8];
    int width = info == 25 ? 2 : info == 26 ? 4 : 8, byte;
    double value;

    for (byte = 0; byte < width; byte++) {
        bytes[width - 1 - byte] = (unsigned char)(bits >> (8 * byte));
    }
    value = width == 2 ? PyFloat_Unpack2((const char *)bytes, 0)
            : width == 4 ? PyFloat_Unpack4((const char *)bytes, 0)
                         : PyFloat_Unpack8((const char *)bytes, 0);
    if (value == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    return PyFloat_FromDouble(value);
}

static PyObject *read_plain(Reader *reader, int depth);
static PyObject *read_key(Reader *reader, Py_ssize_t index);

/* A map's entries into `map`, no key twice (a repeated key bails: cbor2 keeps
 * the last one, in the first one's place). A message's own map (`top`) has
 * Go's names first, then text keys; a nested map text and byte string keys
 * (cbor2's strict_hashable_types refuses others). */
static int
read_entries(Reader *reader, PyObject *map, uint64_t count, int depth, int top)
{
    PyObject *key, *value;
    Py_ssize_t before;
    uint64_t i;
    int stored;

    for (i = 0; i < count; i++) {
        key = top ? read_key(reader, (Py_ssize_t)i) : read_plain(reader, depth);
        if (key == NULL) {
            return -1;
        }
        if (!PyUnicode_CheckExact(key) && !PyBytes_CheckExact(key)) {
            Py_DECREF(key);
            reader->bail = 1;
            return -1;
        }
        value = read_plain(reader, depth);
        if (value == NULL) {
            Py_DECREF(key);
            return -1;
        }
        before = PyDict_GET_SIZE(map);
        stored = PyDict_SetItem(map, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (stored < 0) {
            return -1;
        }
        if (PyDict_GET_SIZE(map) == before) {
            reader->bail = 1;
            return -1;
        }
    }
    return 0;
}

/* One plain value, as cbor2 decodes it: the values go_encode writes (text
 * and byte string map keys only), plus half and single floats. Tags, simple values
 * other than false, true and null, indefinite lengths and nesting past
 * MAX_PLAIN_DEPTH bail. */
static PyObject *
read_plain(Reader *reader, int depth)
{
    int major, info;
    uint64_t argument, i;
    const char *data;
    PyObject *list, *map, *item;

    if (!read_head(reader, &major, &info, &argument)) {
        return NULL;
    }
    switch (major) {
    case 0:
        return PyLong_FromUnsignedLongLong(argument);
    case 1:
        if (argument > (uint64_t)INT64_MAX) {
            break;
        }
        return PyLong_FromLongLong(-1 - (long long)argument);
    case 2:
        data = take(reader, argument);
        return data == NULL ? NULL : PyBytes_FromStringAndSize(data, (Py_ssize_t)argument);
    case 3:
        return read_text(reader, argument);
    case 4:
        if (depth >= MAX_PLAIN_DEPTH || argument > (uint64_t)(reader->end - reader->at)) {
            break;
        }
        list = PyList_New((Py_ssize_t)argument);
        if (list == NULL) {
            return NULL;
        }
        for (i = 0; i < argument; i++) {
            item = read_plain(reader, depth + 1);
            if (item == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    case 5:
        if (depth >= MAX_PLAIN_DEPTH || argument > (uint64_t)(reader->end - reader->at) / 2) {
            break;
        }
        map = PyDict_New();
        if (map != NULL && read_entries(reader, map, argument, depth + 1, 0) < 0) {
            Py_CLEAR(map);
        }
        return map;
    case 7:
        if (info == 20) {
            Py_RETURN_FALSE;
        }
        if (info == 21) {
            Py_RETURN_TRUE;
        }
        if (info == 22) {
            Py_RETURN_NONE;
        }
        if (info >= 25 && info <= 27) {
            return read_float(info, argument);
        }
        break;
    }
    reader->bail = 1;
    return NULL;
}

/* Go's field name `index` when the next item is exactly that text, so the
 * map is keyed by the same str objects Python's reading would compare. */
static PyObject *
read_key(Reader *reader, Py_ssize_t index)
{
    int major, info;
    uint64_t length;
    PyObject *name;
    const char *data;

    if (index < FIELD_COUNT) {
        name = PyTuple_GET_ITEM(go_keys, index);
        if (read_head(reader, &major, &info, &length) && major == 3
            && length == (uint64_t)PyUnicode_GET_LENGTH(name)) {
            data = take(reader, length);
            if (data != NULL && memcmp(data, PyUnicode_DATA(name), (size_t)length) == 0) {
                return Py_NewRef(name);
            }
        }
        reader->bail = 1;  /* not Go's order: go_message would say None */
        return NULL;
    }
    if (!read_head(reader, &major, &info, &length)) {
        return NULL;
    }
    if (major != 3) {
        reader->bail = 1;
        return NULL;
    }
    return read_text(reader, length);
}

PyDoc_STRVAR(go_decode_doc,
"go_decode(value) -> Message | None\n\n"
"go_message(cbor2.loads(value)[0]) read straight off a per-message row's bytes\n"
"when they hold one message of Go's shape (unknown keys with plain values\n"
"allowed); None for anything else, which the Python code then reads.");

static PyObject *
go_decode(PyObject *module, PyObject *value)
{
    Reader reader;
    int major, info, stored;
    uint64_t count, i;
    PyObject *values[FIELD_COUNT] = {NULL}, *key, *item, *extra = NULL, *message = NULL;
    Py_ssize_t before;

    if (!is_configured()) {
        return NULL;
    }
    if (!PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) < 2
        || (unsigned char)PyBytes_AS_STRING(value)[0] != 0x81) {
        Py_RETURN_NONE;
    }
    reader.at = (const unsigned char *)PyBytes_AS_STRING(value) + 1;
    reader.end = reader.at + PyBytes_GET_SIZE(value) - 1;
    reader.bail = 0;
    if (!read_head(&reader, &major, &info, &count) || major != 5 || count < FIELD_COUNT
        || count > (uint64_t)(reader.end - reader.at) / 2) {
        Py_RETURN_NONE;
    }
    /* Go's eight keys in order (read_key knows them), their values kept as
     * go_message would take them from the map; then the user's own keys,
     * straight into `extra`, none twice and none a Go field would take. */
    for (i = 0; i < FIELD_COUNT; i++) {
        key = read_key(&reader, (Py_ssize_t)i);
        if (key == NULL) {
            goto done;
        }
        Py_DECREF(key);
        values[i] = read_plain(&reader, 1);
        if (values[i] == NULL) {
            goto done;
        }
    }
    extra = PyDict_New();
    if (extra == NULL) {
        goto done;
    }
    for (; i < count; i++) {
        key = read_key(&reader, (Py_ssize_t)i);
        if (key == NULL) {
            goto done;
        }
        if (!is_extra_key(key)) {
            Py_DECREF(key);
            reader.bail = 1;
            goto done;
        }
        item = read_plain(&reader, 1);
        if (item == NULL) {
            Py_DECREF(key);
            goto done;
        }
        before = PyDict_GET_SIZE(extra);
        stored = PyDict_SetItem(extra, key, item);
        Py_DECREF(key);
        Py_DECREF(item);
        if (stored < 0) {
            goto done;
        }
        if (PyDict_GET_SIZE(extra) == before) {
            reader.bail = 1;  /* a key twice */
            goto done;
        }
    }
    if (reader.at != reader.end) {
        reader.bail = 1;  /* bytes after the message: the Python reading judges them */
        goto done;
    }
    message = build_message(values, extra);
    extra = NULL;
done:
    for (i = 0; i < FIELD_COUNT; i++) {
        Py_XDECREF(values[i]);
    }
    Py_XDECREF(extra);
    if (message == NULL && reader.bail && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return message;
}
