/*
 * The checks of Go's message shape that reading and writing share: str and
 * list-of-str values, and the keys a message may carry beside Go's eight.
 *
 * Part of deadletter.wire._speedups: included once, in order, by _speedups.c,
 * which holds the shared state; not compiled on its own.
 */

static int
is_str(PyObject *item)
{
    return PyUnicode_CheckExact(item);
}

/* None (Go's nil list), or a list whose every item passes `check`. */
static int
is_list_of(PyObject *list, int (*check)(PyObject *))
{
    Py_ssize_t i;

    if (list == Py_None) {
        return 1;
    }
    if (!PyList_CheckExact(list)) {
        return 0;
    }
    for (i = 0; i < PyList_GET_SIZE(list); i++) {
        if (!check(PyList_GET_ITEM(list, i))) {
            return 0;
        }
    }
    return 1;
}

/* Whether `text` is a str equal to `ascii`, an ASCII str (Go's field names). */
static int
same_ascii(PyObject *text, PyObject *ascii)
{
    Py_ssize_t size = PyUnicode_GET_LENGTH(ascii);

    return PyUnicode_CheckExact(text) && PyUnicode_IS_ASCII(text)
           && PyUnicode_GET_LENGTH(text) == size
           && memcmp(PyUnicode_DATA(text), PyUnicode_DATA(ascii), (size_t)size) == 0;
}

/* Whether `key` can be an unknown key of a message: a str no Go field takes,
 * Go matching field names exactly or, for ASCII names, ignoring case. */
static int
is_extra_key(PyObject *key)
{
    Py_ssize_t size, i, j;
    const char *data, *name;

    if (!PyUnicode_CheckExact(key)) {
        return 0;
    }
    if (!PyUnicode_IS_ASCII(key)) {
        return 1;
    }
    size = PyUnicode_GET_LENGTH(key);
    data = (const char *)PyUnicode_DATA(key);
    for (i = 0; i < FIELD_COUNT; i++) {
        PyObject *field = PyTuple_GET_ITEM(go_keys, i);
        if (PyUnicode_GET_LENGTH(field) != size) {
            continue;
        }
        name = (const char *)PyUnicode_DATA(field);
        for (j = 0; j < size; j++) {
            char a = data[j], b = name[j];
            if (a >= 'A' && a <= 'Z') {
                a += 'a' - 'A';
            }
            if (b >= 'A' && b <= 'Z') {
                b += 'a' - 'A';
            }
            if (a != b) {
                break;
            }
        }
        if (j == size) {
            return 0;
        }
    }
    return 1;
}
