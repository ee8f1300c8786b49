/*
 * Go's times in C: canonical RFC3339Nano text read, instants made into GoTimes
 * and written as Go's text, each as deadletter.wire.gotime's Python code does.
 *
 * Part of deadletter.wire._speedups: included once, in order, by _speedups.c,
 * which holds the shared state; not compiled on its own.
 */

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
