/*
 * A page of rows in one call: the common rows (queue.rows.common_message) as
 * Queued pairs, up to the first the Python rules must read.
 *
 * Part of deadletter.wire._speedups: included once, in order, by _speedups.c,
 * which holds the shared state; not compiled on its own.
 */

PyDoc_STRVAR(read_rows_doc,
"read_rows(rows, start, stop, cutoff_ns, max_row_bytes, pair_type) -> (list, int)\n\n"
"pair_type((key, msg)) for each (key, value) of rows[start:stop] that is the common\n"
"row (a key with its NUL separator, a value of at most max_row_bytes that\n"
"go_decode reads as one message queued at or after cutoff_ns), up to the first\n"
"row that is not; with the index of that row (stop, or len(rows) if less, when\n"
"there is none),\n"
"which the Python code then reads and judges.");

static PyObject *
read_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rows, *found = NULL, *result = NULL, *row, *key, *value, *msg, *queued_at, *pair;
    PyObject *number;
    PyTypeObject *pair_type;
    Py_ssize_t start, stop, count, index;
    long long cutoff, max_row_bytes, unix_ns;
    int overflow;

    if (!is_configured()) {
        return NULL;
    }
    if (nargs != 6 || !PyType_Check(args[5])
        || !PyType_IsSubtype((PyTypeObject *)args[5], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "read_rows(rows, start, stop, cutoff_ns, max_row_bytes, pair_type)");
        return NULL;
    }
    pair_type = (PyTypeObject *)args[5];
    start = PyLong_AsSsize_t(args[1]);
    stop = PyLong_AsSsize_t(args[2]);
    cutoff = PyLong_AsLongLong(args[3]);
    max_row_bytes = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    rows = PySequence_Fast(args[0], "rows must be a sequence of (key, value)");
    if (rows == NULL) {
        return NULL;
    }
    count = PySequence_Fast_GET_SIZE(rows);
    if (stop < count) {
        count = stop;
    }
    found = PyList_New(0);
    if (found == NULL) {
        goto done;
    }
    for (index = start < 0 ? 0 : start; index < count; index++) {
        row = PySequence_Fast_GET_ITEM(rows, index);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) {
            break;
        }
        key = PyTuple_GET_ITEM(row, 0);
        value = PyTuple_GET_ITEM(row, 1);
        if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(value)
            || memchr(PyBytes_AS_STRING(key), 0, (size_t)PyBytes_GET_SIZE(key)) == NULL
            || PyBytes_GET_SIZE(value) > max_row_bytes) {
            break;
        }
        msg = go_decode(module, value);
        if (msg == NULL) {
            goto done;
        }
        if (msg == Py_None) {
            Py_DECREF(msg);
            break;
        }
        queued_at = PyObject_GetAttr(msg, PyTuple_GET_ITEM(attributes, 1));
        if (queued_at == NULL) {
            Py_DECREF(msg);
            goto done;
        }
        number = Py_TYPE(queued_at) == (PyTypeObject *)gotime_type
                     ? *(PyObject **)((char *)queued_at + unix_ns_offset)
                     : NULL;
        unix_ns = number != NULL ? PyLong_AsLongLongAndOverflow(number, &overflow) : 0;
        Py_DECREF(queued_at);
        if (number == NULL || overflow || (unix_ns == -1 && PyErr_Occurred())
            || unix_ns < cutoff) {
            PyErr_Clear();
            Py_DECREF(msg);
            break;
        }
        pair = pair_type->tp_alloc(pair_type, 2);
        if (pair == NULL) {
            Py_DECREF(msg);
            goto done;
        }
        PyTuple_SET_ITEM(pair, 0, Py_NewRef(key));
        PyTuple_SET_ITEM(pair, 1, msg);
        if (PyList_Append(found, pair) < 0) {
            Py_DECREF(pair);
            goto done;
        }
        Py_DECREF(pair);
    }
    result = Py_BuildValue("(On)", found, index);
done:
    Py_XDECREF(found);
    Py_DECREF(rows);
    return result;
}
