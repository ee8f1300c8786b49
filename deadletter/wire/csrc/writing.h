/*
 * Writing a message: the bytes Go writes for a Message of its shape, a store's
 * stamp written in place of a missing QueuedAt.
 *
 * Part of deadletter.wire._speedups: included once, in order, by _speedups.c,
 * which holds the shared state; not compiled on its own.
 */

/* Counts bytes while `out` is NULL, then writes them: one walk for both. */
typedef struct {
    char *out;
    Py_ssize_t size;
} Writer;

static void
put(Writer *writer, const void *data, Py_ssize_t size)
{
    if (writer->out != NULL) {
        memcpy(writer->out + writer->size, data, (size_t)size);
    }
    writer->size += size;
}

/* A CBOR head in its shortest form, as Go's encoder writes it. */
static void
put_head(Writer *writer, unsigned char major, uint64_t value)
{
    unsigned char head[9];
    int size, i;

    major <<= 5;
    if (value < 24) {
        head[0] = major | (unsigned char)value;
        size = 1;
    }
    else {
        int width = value <= 0xFF ? 1 : value <= 0xFFFF ? 2 : value <= 0xFFFFFFFFu ? 4 : 8;
        head[0] = major | (unsigned char)(width == 1 ? 24 : width == 2 ? 25 : width == 4 ? 26 : 27);
        for (i = 0; i < width; i++) {
            head[width - i] = (unsigned char)(value >> (8 * i));
        }
        size = width + 1;
    }
    put(writer, head, size);
}

/* A str as CBOR text; its UTF-8 was checked by `text_utf8` before. */
static void
put_text(Writer *writer, PyObject *text)
{
    Py_ssize_t size;
    const char *data = PyUnicode_AsUTF8AndSize(text, &size);

    put_head(writer, 3, (uint64_t)size);
    put(writer, data, size);
}

static void
put_text_list(Writer *writer, PyObject *list)
{
    Py_ssize_t i, size;

    if (list == Py_None) {
        put(writer, "\xf6", 1);
        return;
    }
    size = PyList_GET_SIZE(list);
    put_head(writer, 4, (uint64_t)size);
    for (i = 0; i < size; i++) {
        put_text(writer, PyList_GET_ITEM(list, i));
    }
}

/* Whether `text` is a str with a UTF-8 form (a lone surrogate has none). */
static int
text_utf8(PyObject *text)
{
    if (!PyUnicode_CheckExact(text)) {
        return 0;
    }
    if (PyUnicode_AsUTF8AndSize(text, NULL) == NULL) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The text Go writes for a GoTime, in *text (a new reference), or NULL for
 * None. Returns 0 when the Python encoder must judge the value: anything but
 * None or a GoTime, a time whose text fails, or one that may be Go's zero
 * time (written as null; the Python encoder asks `is_zero`). */
static int
wire_time(PyObject *time, PyObject **text)
{
    PyObject *formatted;
    const char *data;
    Py_ssize_t size;

    *text = NULL;
    if (time == Py_None) {
        return 1;
    }
    if (Py_TYPE(time) != (PyTypeObject *)gotime_type) {
        return 0;
    }
    formatted = *(PyObject **)((char *)time + text_offset);
    if (formatted != NULL && formatted != Py_None) {
        Py_INCREF(formatted);
    }
    else {
        formatted = PyObject_CallMethodNoArgs(time, format_name);
        if (formatted == NULL) {
            PyErr_Clear();
            return 0;
        }
    }
    data = PyUnicode_CheckExact(formatted) ? PyUnicode_AsUTF8AndSize(formatted, &size) : NULL;
    if (data == NULL || size < 4 || memcmp(data, "0002", 4) < 0) {
        PyErr_Clear();
        Py_DECREF(formatted);
        return 0;
    }
    *text = formatted;
    return 1;
}

/* Whether go_encode writes `value` (in an unknown key) as cbor2 would: None,
 * bools, 64-bit ints, finite floats, str with UTF-8, bytes, and lists and
 * maps of these (keyed by str or bytes: the keys cbor2 reads back), exact
 * types only. Anything else is the Python encoder's. */
static int
is_plain(PyObject *value, int depth)
{
    Py_ssize_t i = 0;
    PyObject *key, *item;
    int overflow;
    long long number;

    if (value == Py_None || value == Py_True || value == Py_False || PyBytes_CheckExact(value)) {
        return 1;
    }
    if (PyLong_CheckExact(value)) {
        number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return !overflow;
    }
    if (PyFloat_CheckExact(value)) {
        return isfinite(PyFloat_AS_DOUBLE(value));
    }
    if (PyUnicode_CheckExact(value)) {
        return text_utf8(value);
    }
    if (depth >= MAX_PLAIN_DEPTH) {
        return 0;
    }
    if (PyList_CheckExact(value)) {
        for (i = 0; i < PyList_GET_SIZE(value); i++) {
            if (!is_plain(PyList_GET_ITEM(value, i), depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    if (PyDict_CheckExact(value)) {
        while (PyDict_Next(value, &i, &key, &item)) {
            if ((!PyUnicode_CheckExact(key) && !PyBytes_CheckExact(key))
                || !is_plain(key, depth + 1) || !is_plain(item, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

/* A value `is_plain` accepted, in the bytes cbor2 writes for it. */
static void
put_plain(Writer *writer, PyObject *value)
{
    Py_ssize_t i = 0;
    PyObject *key, *item;
    long long number;
    unsigned char head[9];
    uint64_t bits;
    double real;
    int overflow, byte;

    if (value == Py_None) {
        put(writer, "\xf6", 1);
    }
    else if (value == Py_True) {
        put(writer, "\xf5", 1);
    }
    else if (value == Py_False) {
        put(writer, "\xf4", 1);
    }
    else if (PyLong_CheckExact(value)) {
        number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number >= 0) {
            put_head(writer, 0, (uint64_t)number);
        }
        else {
            put_head(writer, 1, (uint64_t)(-1 - number));
        }
    }
    else if (PyFloat_CheckExact(value)) {
        real = PyFloat_AS_DOUBLE(value);
        memcpy(&bits, &real, sizeof bits);
        head[0] = 0xfb;
        for (byte = 0; byte < 8; byte++) {
            head[8 - byte] = (unsigned char)(bits >> (8 * byte));
        }
        put(writer, head, 9);
    }
    else if (PyUnicode_CheckExact(value)) {
        put_text(writer, value);
    }
    else if (PyBytes_CheckExact(value)) {
        put_head(writer, 2, (uint64_t)PyBytes_GET_SIZE(value));
        put(writer, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    }
    else if (PyList_CheckExact(value)) {
        put_head(writer, 4, (uint64_t)PyList_GET_SIZE(value));
        for (i = 0; i < PyList_GET_SIZE(value); i++) {
            put_plain(writer, PyList_GET_ITEM(value, i));
        }
    }
    else {
        put_head(writer, 5, (uint64_t)PyDict_GET_SIZE(value));
        while (PyDict_Next(value, &i, &key, &item)) {
            put_plain(writer, key);
            put_plain(writer, item);
        }
    }
}

/* Whether a message's `extra` is a dict go_encode writes: unknown keys with
 * plain values. */
static int
is_plain_extra(PyObject *extra)
{
    Py_ssize_t i = 0;
    PyObject *key, *value;

    if (!PyDict_CheckExact(extra)) {
        return 0;
    }
    while (PyDict_Next(extra, &i, &key, &value)) {
        if (!is_extra_key(key) || !text_utf8(key) || !is_plain(value, 0)) {
            return 0;
        }
    }
    return 1;
}

/* The QueuedAt text of the instant `stamp` (an int of nanoseconds, UTC) in
 * the years go_message reads back as a GoTime; NULL, no exception, otherwise. */
static PyObject *
stamp_text(PyObject *stamp)
{
    long long unix_ns, offset;
    GoClock clock;
    char text[40];
    PyObject *result;

    if (!instant_args(&stamp, 1, &unix_ns, &offset) || !clock_at(unix_ns, 0, &clock)
        || clock.year < 2) {
        return NULL;
    }
    result = PyUnicode_DecodeASCII(text, format_clock(&clock, text), NULL);
    if (result == NULL) {
        PyErr_Clear();
    }
    return result;
}

PyDoc_STRVAR(go_encode_doc,
"go_encode(msg, stamp_ns=None) -> bytes | None\n\n"
"The per-message row value Go writes for `msg` ([msg] in CBOR) when it has\n"
"Go's shape, unknown keys holding plain values allowed; None for the Python\n"
"encoder to write. With `stamp_ns`, a message without `queued_at` is written\n"
"as queued at that instant (UTC), the message itself left as it is.");

static PyObject *
go_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *values[FIELD_COUNT + 1] = {NULL}, *times[2] = {NULL, NULL}, *result = NULL;
    PyObject *msg, *stamp = Py_None;
    long long code = 0;
    int overflow = 1, i, shaped = 0;
    Writer writer = {NULL, 0};

    if (!is_configured()) {
        return NULL;
    }
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "go_encode(msg, stamp_ns=None) takes 1 or 2 arguments");
        return NULL;
    }
    msg = args[0];
    if (nargs == 2) {
        stamp = args[1];
    }
    if (Py_TYPE(msg) != (PyTypeObject *)message_type
        || (stamp != Py_None && !PyLong_CheckExact(stamp))) {
        Py_RETURN_NONE;
    }
    for (i = 0; i < FIELD_COUNT + 1; i++) {
        values[i] = PyObject_GetAttr(msg, PyTuple_GET_ITEM(attributes, i));
        if (values[i] == NULL) {
            goto done;
        }
    }
    /* The times first: `format` is Python code, during which another thread
     * could change a list. From the checks below to the last byte written,
     * no Python code runs, so what was checked is what gets written. */
    shaped = wire_time(values[0], &times[0]) && wire_time(values[1], &times[1]);
    if (shaped && values[1] == Py_None && stamp != Py_None) {
        times[1] = stamp_text(stamp);
        shaped = times[1] != NULL;
    }
    if (shaped && PyLong_Check(values[7]) && !PyBool_Check(values[7])
        && (PyLong_CheckExact(values[7]) || Py_TYPE(values[7]) == (PyTypeObject *)event_code_type)) {
        code = PyLong_AsLongLongAndOverflow(values[7], &overflow);
        if (code == -1 && PyErr_Occurred()) {
            goto done;
        }
    }
    shaped = shaped && !overflow && text_utf8(values[2]) && text_utf8(values[3])
             && is_list_of(values[4], text_utf8) && is_list_of(values[5], text_utf8)
             && is_list_of(values[6], text_utf8) && is_plain_extra(values[8]);
    if (!shaped) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (;;) {
        put_head(&writer, 4, 1);
        put_head(&writer, 5, FIELD_COUNT + (uint64_t)PyDict_GET_SIZE(values[8]));
        for (i = 0; i < FIELD_COUNT; i++) {
            put_text(&writer, PyTuple_GET_ITEM(go_keys, i));
            if (i < 2) {
                if (times[i] == NULL) {
                    put(&writer, "\xf6", 1);
                }
                else {
                    put_text(&writer, times[i]);
                }
            }
            else if (i < 4) {
                put_text(&writer, values[i]);
            }
            else if (i < 7) {
                put_text_list(&writer, values[i]);
            }
            else if (code >= 0) {
                put_head(&writer, 0, (uint64_t)code);
            }
            else {
                put_head(&writer, 1, (uint64_t)(-1 - code));
            }
        }
        {
            Py_ssize_t at = 0;
            PyObject *key, *value;

            while (PyDict_Next(values[8], &at, &key, &value)) {
                put_text(&writer, key);
                put_plain(&writer, value);
            }
        }
        if (writer.out != NULL) {
            break;
        }
        result = PyBytes_FromStringAndSize(NULL, writer.size);
        if (result == NULL) {
            goto done;
        }
        writer.out = PyBytes_AS_STRING(result);
        writer.size = 0;
    }
done:
    for (i = 0; i < FIELD_COUNT + 1; i++) {
        Py_XDECREF(values[i]);
    }
    Py_XDECREF(times[0]);
    Py_XDECREF(times[1]);
    return result;
}
