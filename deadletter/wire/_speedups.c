/*
 * deadletter.wire._speedups: the scan's per-message checks in C.
 *
 * `codec._message` checks each decoded message against the shape Go writes
 * and builds a `Message`; in Python that costs more than cbor2's decoding
 * itself. `go_message` does the same for the one shape Go writes (its eight
 * keys in order, canonical RFC 3339 times between the years 1678 and 2262 in
 * offsets `datetime` holds, str, list-of-str and int values; times become
 * `GoTime`s, `datetime`s that keep Go's nanoseconds and text) and returns
 * None for anything else, which
 * the Python code then reads and judges. So this module never decides that a
 * value is corrupt: it only answers "yes, exactly Go's shape" faster, and
 * tests/wire/test_speedups.py checks that answer against the Python one.
 * `go_encode` is the same for writing: the bytes of a message of that shape,
 * or None for the Python encoder to write (or refuse). Times (`go_time`,
 * `format_time`, `parse_time`) and a page's common rows (`read_rows`) follow
 * the same rule.
 *
 * This file holds the shared state, the set-up and the module; the code is
 * in csrc/ (times, shapes, reading, rows, writing), included below in that
 * order as one translation unit, so every function stays static.
 *
 * Optional: without a compiler the app runs on the Python code alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h> /* PyMemberDef, part of Python.h from 3.12 */
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NS_PER_SECOND 1000000000LL
/* Seconds whose nanoseconds still fit in a signed 64-bit integer. */
#define MAX_SECONDS 9223372035LL
#define FIELD_COUNT 8
/* How deep go_encode writes lists and maps in a message's unknown keys. */
#define MAX_PLAIN_DEPTH 16
#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX 16 /* T_OBJECT_EX before Python 3.12 */
#endif

static PyObject *message_type;  /* deadletter.wire.messages.Message */
static PyObject *gotime_type;   /* deadletter.wire.gotime.GoTime */
static PyObject *fields_template; /* Message's attribute names, each None */
static PyObject *event_codes;   /* {int: EventCode} */
static PyObject *go_keys;       /* Go's eight field names, in Go's order */
static PyObject *attributes;    /* Message's nine attribute names, `extra` last */
static PyObject *dict_name;     /* "__dict__" */
/* Where GoTime keeps the instant in nanoseconds and Go's text: its slots. */
static Py_ssize_t unix_ns_offset = -1, text_offset = -1;
/* A timezone for each whole-minute offset datetime holds, made once. */
#define ZONE_MINUTES 1439
static PyObject *zones[2 * ZONE_MINUTES + 1];
static PyObject *format_name;   /* "format" */
static PyObject *event_code_type; /* deadletter.wire.messages.EventCode */

static int
is_configured(void)
{
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "deadletter.wire._speedups.setup() has not been called");
        return 0;
    }
    return 1;
}

#include "csrc/times.h"
#include "csrc/shapes.h"
#include "csrc/reading.h"
#include "csrc/rows.h"
#include "csrc/writing.h"

/* The offset in a `type` instance of its __slots__ entry `name`. */
static int
slot_offset(PyObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descriptor = PyDict_GetItemString(((PyTypeObject *)type)->tp_dict, name);

    if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type)
        || ((PyMemberDescrObject *)descriptor)->d_member->type != Py_T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "gotime_type needs a __slots__ entry %s", name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)descriptor)->d_member->offset;
    return 0;
}

/* GoTime, whose slots the C code fills: a datetime subclass with `_unix_ns`
 * and `_text` in its __slots__. */
static int
set_gotime_type(PyObject *type)
{
    Py_ssize_t new_unix_ns_offset, new_text_offset;

    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, PyDateTimeAPI->DateTimeType)) {
        PyErr_SetString(PyExc_TypeError, "gotime_type must be a datetime subclass");
        return -1;
    }
    if (slot_offset(type, "_unix_ns", &new_unix_ns_offset) < 0
        || slot_offset(type, "_text", &new_text_offset) < 0) {
        return -1;
    }
    unix_ns_offset = new_unix_ns_offset;
    text_offset = new_text_offset;
    Py_XSETREF(gotime_type, Py_NewRef(type));
    return 0;
}

PyDoc_STRVAR(setup_time_doc,
"setup_time(gotime_type)\n\n"
"The GoTime class go_time and parse_time build; deadletter.wire.gotime calls it once.");

static PyObject *
setup_time(PyObject *module, PyObject *type)
{
    if (set_gotime_type(type) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(setup_doc,
"setup(message_type, gotime_type, event_codes, go_keys, attributes, event_code_type)\n\n"
"The Python objects go_message and go_encode work with; deadletter.wire.codec calls it once.");

static PyObject *
setup(PyObject *module, PyObject *args)
{
    PyObject *new_message, *new_gotime, *new_codes, *new_keys, *new_attributes;
    PyObject *new_event_code, *new_template;

    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!:setup", &PyType_Type, &new_message, &PyType_Type,
                          &new_gotime, &PyDict_Type, &new_codes, &PyTuple_Type, &new_keys,
                          &PyTuple_Type, &new_attributes, &PyType_Type, &new_event_code)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(new_keys) != FIELD_COUNT
        || PyTuple_GET_SIZE(new_attributes) != FIELD_COUNT + 1) {
        PyErr_SetString(PyExc_ValueError, "go_keys needs 8 names and attributes 9");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < FIELD_COUNT + 1; i++) {
        if ((i < FIELD_COUNT && (!PyUnicode_CheckExact(PyTuple_GET_ITEM(new_keys, i))
                                 || !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(new_keys, i))))
            || !PyUnicode_CheckExact(PyTuple_GET_ITEM(new_attributes, i))) {
            PyErr_SetString(PyExc_TypeError, "field names must be str, Go's ASCII");
            return NULL;
        }
    }
    if (set_gotime_type(new_gotime) < 0) {
        return NULL;
    }
    new_template = PyDict_New();
    if (new_template == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < FIELD_COUNT + 1; i++) {
        if (PyDict_SetItem(new_template, PyTuple_GET_ITEM(new_attributes, i), Py_None) < 0) {
            Py_DECREF(new_template);
            return NULL;
        }
    }
    Py_XSETREF(fields_template, new_template);
    Py_XSETREF(message_type, Py_NewRef(new_message));
    Py_XSETREF(event_codes, Py_NewRef(new_codes));
    Py_XSETREF(go_keys, Py_NewRef(new_keys));
    Py_XSETREF(attributes, Py_NewRef(new_attributes));
    Py_XSETREF(event_code_type, Py_NewRef(new_event_code));
    Py_RETURN_NONE;
}

static PyMethodDef speedups_methods[] = {
    {"go_decode", go_decode, METH_O, go_decode_doc},
    {"format_time", (PyCFunction)(void (*)(void))format_time, METH_FASTCALL, format_time_doc},
    {"go_encode", (PyCFunction)(void (*)(void))go_encode, METH_FASTCALL, go_encode_doc},
    {"go_message", go_message, METH_O, go_message_doc},
    {"go_time", (PyCFunction)(void (*)(void))go_time, METH_FASTCALL, go_time_doc},
    {"parse_time", parse_time, METH_O, parse_time_doc},
    {"read_rows", (PyCFunction)(void (*)(void))read_rows, METH_FASTCALL, read_rows_doc},
    {"setup", setup, METH_VARARGS, setup_doc},
    {"setup_time", setup_time, METH_O, setup_time_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "deadletter.wire._speedups",
    "The scan's per-message checks in C; see deadletter.wire.codec.",
    -1,
    speedups_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    dict_name = PyUnicode_InternFromString("__dict__");
    format_name = PyUnicode_InternFromString("format");
    if (dict_name == NULL || format_name == NULL) {
        return NULL;
    }
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    return PyModule_Create(&speedups_module);
}
