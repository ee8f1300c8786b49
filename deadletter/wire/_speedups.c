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
 * or None for the Python encoder to write (or refuse).
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
two_digits(const char *s, int *value)
{
    if (s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9') {
        return 0;
    }
    *value = (s[0] - '0') * 10 + (s[1] - '0');
    return 1;
}

static int
is_leap(int year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t
days_from_civil(int64_t year, int month, int day)
{
    year -= month <= 2;
    int64_t era = (year >= 0 ? year : year - 399) / 400;
    int64_t year_of_era = year - era * 400;
    int64_t day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

/*
 * Read Go's canonical RFC3339Nano text, exactly what `gotime._canonical`
 * accepts, into an instant and an offset. Returns 0, without an exception,
 * for any other text and for years outside the 64-bit nanosecond range or
 * before 0002 (Go's zero time): the caller then takes the Python path.
 */
typedef struct {
    int year, month, day, hour, minute, second, offset;
    long long nanos, unix_ns;
} GoClock;

static int
read_time(PyObject *text, GoClock *clock)
{
    static const int month_days[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    Py_ssize_t size;
    const char *s;
    int century, year_of_century, year, month, day, hour, minute, second;
    Py_ssize_t end, position;
    long long nanos = 0, scale = NS_PER_SECOND, seconds;
    int digits = 0, zone_hours, zone_minutes;

    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text)) {
        return 0;
    }
    size = PyUnicode_GET_LENGTH(text);
    s = (const char *)PyUnicode_DATA(text);
    if (size < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') {
        return 0;
    }
    if (!two_digits(s, &century) || !two_digits(s + 2, &year_of_century)
        || !two_digits(s + 5, &month) || !two_digits(s + 8, &day)
        || !two_digits(s + 11, &hour) || !two_digits(s + 14, &minute)
        || !two_digits(s + 17, &second)) {
        return 0;
    }
    year = century * 100 + year_of_century;
    if (year < 2 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59
        || second > 59) {
        return 0;
    }
    if (day > month_days[month] + (month == 2 && is_leap(year))) {
        return 0;
    }
    position = 19;
    if (s[position] == '.') {
        for (position++; position < size && s[position] >= '0' && s[position] <= '9';
             position++) {
            if (++digits > 9) {
                return 0;
            }
            nanos = nanos * 10 + (s[position] - '0');
            scale /= 10;
        }
        if (digits == 0 || s[position - 1] == '0') {
            return 0;
        }
        nanos *= scale;
    }
    end = size - position;
    if (end == 1 && s[position] == 'Z') {
        clock->offset = 0;
    }
    else if (end == 6 && (s[position] == '+' || s[position] == '-') && s[position + 3] == ':'
             && two_digits(s + position + 1, &zone_hours)
             && two_digits(s + position + 4, &zone_minutes)) {
        /* Go writes up to ±24:00; `datetime` holds less than a day (the Python
         * code makes that a GoOnlyTime). */
        if (zone_hours > 23 || zone_minutes > 59 || (zone_hours == 0 && zone_minutes == 0)) {
            return 0;
        }
        clock->offset = zone_hours * 3600 + zone_minutes * 60;
        if (s[position] == '-') {
            clock->offset = -clock->offset;
        }
    }
    else {
        return 0;
    }
    seconds = days_from_civil(year, month, day) * 86400LL + hour * 3600 + minute * 60 + second
              - clock->offset;
    if (seconds > MAX_SECONDS || seconds < -MAX_SECONDS) {
        return 0;
    }
    clock->unix_ns = seconds * NS_PER_SECOND + nanos;
    clock->year = year;
    clock->month = month;
    clock->day = day;
    clock->hour = hour;
    clock->minute = minute;
    clock->second = second;
    clock->nanos = nanos;
    return 1;
}

/* The timezone `offset` seconds east of UTC (a whole number of minutes). */
static PyObject *
zone_of(int offset)
{
    int index = offset / 60 + ZONE_MINUTES;
    PyObject *delta;

    if (zones[index] == NULL) {
        if (offset == 0) {
            zones[index] = Py_NewRef(PyDateTime_TimeZone_UTC);
        }
        else {
            delta = PyDelta_FromDSU(0, offset, 0);
            if (delta == NULL) {
                return NULL;
            }
            zones[index] = PyTimeZone_FromOffset(delta);
            Py_DECREF(delta);
        }
    }
    return zones[index];
}

static void
set_slot(PyObject *object, Py_ssize_t offset, PyObject *value)
{
    Py_XSETREF(*(PyObject **)((char *)object + offset), value);
}

/* A GoTime at `clock`, keeping `text`, as `gotime.from_go_text` makes it. */
static PyObject *
new_time(PyObject *text, const GoClock *clock)
{
    PyObject *time, *zone, *unix_ns;

    zone = zone_of(clock->offset);
    if (zone == NULL) {
        return NULL;
    }
    unix_ns = PyLong_FromLongLong(clock->unix_ns);
    if (unix_ns == NULL) {
        return NULL;
    }
    time = PyDateTimeAPI->DateTime_FromDateAndTime(
        clock->year, clock->month, clock->day, clock->hour, clock->minute, clock->second,
        (int)(clock->nanos / 1000), zone, (PyTypeObject *)gotime_type);
    if (time == NULL) {
        Py_DECREF(unix_ns);
        return NULL;
    }
    set_slot(time, unix_ns_offset, unix_ns);
    set_slot(time, text_offset, Py_NewRef(text));
    return time;
}

/* The civil date of `days` since 1970-01-01 (H. Hinnant's algorithm). */
static void
civil_from_days(int64_t days, int64_t *year, int *month, int *day)
{
    int64_t era, day_of_era, year_of_era, day_of_year, shifted_month;

    days += 719468;
    era = (days >= 0 ? days : days - 146096) / 146097;
    day_of_era = days - era * 146097;
    year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096)
                  / 365;
    day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    shifted_month = (5 * day_of_year + 2) / 153;
    *day = (int)(day_of_year - (153 * shifted_month + 2) / 5 + 1);
    *month = (int)(shifted_month < 10 ? shifted_month + 3 : shifted_month - 9);
    *year = year_of_era + era * 400 + (*month <= 2);
}

/* The wall clock of the instant `unix_ns` in the zone `offset` seconds east
 * (less than a day either way), years 0 to 9999; 0 for any other. */
static int
clock_at(long long unix_ns, long long offset, GoClock *clock)
{
    long long seconds = unix_ns / NS_PER_SECOND, nanos = unix_ns % NS_PER_SECOND;
    long long local, days, second_of_day;
    int64_t year;

    if (offset <= -86400 || offset >= 86400) {
        return 0;
    }
    if (nanos < 0) {
        nanos += NS_PER_SECOND;
        seconds -= 1;
    }
    local = seconds + offset;
    days = local / 86400;
    second_of_day = local % 86400;
    if (second_of_day < 0) {
        second_of_day += 86400;
        days -= 1;
    }
    civil_from_days(days, &year, &clock->month, &clock->day);
    if (year < 0 || year > 9999) {
        return 0;
    }
    clock->year = (int)year;
    clock->hour = (int)(second_of_day / 3600);
    clock->minute = (int)(second_of_day / 60 % 60);
    clock->second = (int)(second_of_day % 60);
    clock->nanos = nanos;
    clock->offset = (int)offset;
    clock->unix_ns = unix_ns;
    return 1;
}

/* Go's RFC3339Nano text of `clock` into `out` (at least 36 bytes), as
 * `gotime._format` writes it: trailing fraction zeros trimmed, 'Z' for
 * offset 0, minutes of the offset truncated toward zero. Returns its length. */
static Py_ssize_t
format_clock(const GoClock *clock, char *out)
{
    Py_ssize_t size;
    long long nanos = clock->nanos;
    int digits = 9, minutes, i;
    char sign;

    size = sprintf(out, "%04d-%02d-%02dT%02d:%02d:%02d", clock->year, clock->month, clock->day,
                   clock->hour, clock->minute, clock->second);
    if (nanos) {
        while (nanos % 10 == 0) {
            nanos /= 10;
            digits--;
        }
        out[size++] = '.';
        for (i = digits - 1; i >= 0; i--) {
            out[size + i] = (char)('0' + nanos % 10);
            nanos /= 10;
        }
        size += digits;
    }
    if (clock->offset == 0) {
        out[size++] = 'Z';
        return size;
    }
    if (clock->offset <= -60) {
        sign = '-';
        minutes = -clock->offset / 60;
    }
    else {
        sign = '+';
        minutes = clock->offset > 0 ? clock->offset / 60 : 0;
    }
    size += sprintf(out + size, "%c%02d:%02d", sign, minutes / 60, minutes % 60);
    return size;
}

/* (unix_ns, offset) from two exact ints in range; 0 (no exception) otherwise. */
static int
instant_args(PyObject *const *args, Py_ssize_t nargs, long long *unix_ns, long long *offset)
{
    int overflow = 0;

    *offset = 0;
    if (nargs < 1 || nargs > 2 || !PyLong_CheckExact(args[0])
        || (nargs == 2 && !PyLong_CheckExact(args[1]))) {
        return 0;
    }
    *unix_ns = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (overflow || (*unix_ns == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (nargs == 2) {
        *offset = PyLong_AsLongLongAndOverflow(args[1], &overflow);
        if (overflow || (*offset == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static int
time_configured(void)
{
    if (gotime_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "deadletter.wire._speedups.setup_time() has not been called");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(format_time_doc,
"format_time(unix_ns, offset=0) -> str | None\n\n"
"Go's RFC3339Nano text of an instant in a zone `offset` seconds east (less than\n"
"a day), as gotime._format writes it; None outside 64-bit nanoseconds, years\n"
"0..9999 or that offset, for the Python code to write or refuse.");

static PyObject *
format_time(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long unix_ns, offset;
    GoClock clock;
    char text[40];

    if (!instant_args(args, nargs, &unix_ns, &offset) || !clock_at(unix_ns, offset, &clock)) {
        Py_RETURN_NONE;
    }
    return PyUnicode_DecodeASCII(text, format_clock(&clock, text), NULL);
}

PyDoc_STRVAR(go_time_doc,
"go_time(unix_ns, offset=0) -> GoTime | None\n\n"
"The GoTime of an instant in a zone of whole minutes, as gotime._from_instant\n"
"makes it (no text kept); None for what the Python code must make.");

static PyObject *
go_time(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long unix_ns, offset;
    GoClock clock;

    if (!time_configured()) {
        return NULL;
    }
    if (!instant_args(args, nargs, &unix_ns, &offset) || offset % 60 != 0
        || offset / 60 > ZONE_MINUTES || offset / 60 < -ZONE_MINUTES
        || !clock_at(unix_ns, offset, &clock) || clock.year < 1) {
        Py_RETURN_NONE;
    }
    PyObject *zone = zone_of(clock.offset), *number, *time;
    if (zone == NULL) {
        return NULL;
    }
    number = PyLong_FromLongLong(unix_ns);
    if (number == NULL) {
        return NULL;
    }
    time = PyDateTimeAPI->DateTime_FromDateAndTime(
        clock.year, clock.month, clock.day, clock.hour, clock.minute, clock.second,
        (int)(clock.nanos / 1000), zone, (PyTypeObject *)gotime_type);
    if (time == NULL) {
        Py_DECREF(number);
        return NULL;
    }
    set_slot(time, unix_ns_offset, number);
    return time;
}

PyDoc_STRVAR(parse_time_doc,
"parse_time(text) -> GoTime | None\n\n"
"The GoTime of Go's canonical RFC3339Nano text in go_message's range, keeping\n"
"the text, as gotime.from_go_text makes it; None for any other text.");

static PyObject *
parse_time(PyObject *module, PyObject *text)
{
    GoClock clock;

    if (!time_configured()) {
        return NULL;
    }
    if (!read_time(text, &clock)) {
        Py_RETURN_NONE;
    }
    return new_time(text, &clock);
}

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

static int
is_configured(void)
{
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "deadletter.wire._speedups.setup() has not been called");
        return 0;
    }
    return 1;
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

/* --- writing ------------------------------------------------------------ */

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

PyDoc_STRVAR(read_go_time_doc,
"read_go_time(text) -> tuple[int, int] | None\n\n"
"(unix_ns, offset) of Go's canonical RFC3339Nano text in go_message's range;\n"
"None for anything else. For tests: go_message reads its times this way.");

static PyObject *
read_go_time(PyObject *module, PyObject *text)
{
    GoClock clock;

    if (!read_time(text, &clock)) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Li)", clock.unix_ns, clock.offset);
}

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
    {"read_go_time", read_go_time, METH_O, read_go_time_doc},
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
