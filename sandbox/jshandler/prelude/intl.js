// A small Intl for QuickJS-NG, which has none: DateTimeFormat, NumberFormat and PluralRules in
// the en-US forms (whatever locale is asked, the one resolved is en-US), dates in UTC, the
// sandbox's only time zone. The formatjs polyfills carry CLDR data for every locale, megabytes
// every task's snapshot would copy; handlers format for machines far more often than for
// people, and a locale they need can come with them (docs/RATIONALE.md).
export function installIntl(g, define) {
  const locale = "en-US";
  const checkZone = (tz) => {
    if (tz === undefined) return "UTC";
    const z = String(tz);
    if (/^(utc|etc\/utc|gmt|etc\/gmt|z|zulu)$/i.test(z)) return "UTC";
    throw new RangeError(`Intl: the time zone ${z} is not available here: dates are formatted in UTC only (docs/guests.md)`);
  };
  const months = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
  const days = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  const styles = {
    date: {
      full: { weekday: "long", year: "numeric", month: "long", day: "numeric" },
      long: { year: "numeric", month: "long", day: "numeric" },
      medium: { year: "numeric", month: "short", day: "numeric" },
      short: { year: "2-digit", month: "numeric", day: "numeric" },
    },
    time: {
      full: { hour: "numeric", minute: "2-digit", second: "2-digit", timeZoneName: "long" },
      long: { hour: "numeric", minute: "2-digit", second: "2-digit", timeZoneName: "short" },
      medium: { hour: "numeric", minute: "2-digit", second: "2-digit" },
      short: { hour: "numeric", minute: "2-digit" },
    },
  };
  const pad = (n, w = 2) => String(n).padStart(w, "0");

  class DateTimeFormat {
    #o;
    constructor(locales, options = {}) {
      options = options ?? {};
      const o = { timeZone: checkZone(options.timeZone) };
      const fields = ["weekday", "era", "year", "month", "day", "hour", "minute", "second", "fractionalSecondDigits", "timeZoneName"];
      if (options.dateStyle || options.timeStyle) {
        Object.assign(o, options.dateStyle ? styles.date[options.dateStyle] : {}, options.timeStyle ? styles.time[options.timeStyle] : {});
        if ((options.dateStyle && !styles.date[options.dateStyle]) || (options.timeStyle && !styles.time[options.timeStyle]))
          throw new RangeError("Intl.DateTimeFormat: dateStyle and timeStyle are full, long, medium or short");
        o.dateStyle = options.dateStyle;
        o.timeStyle = options.timeStyle;
      } else {
        for (const f of fields) if (options[f] !== undefined) o[f] = options[f];
        if (!fields.some((f) => o[f] !== undefined)) Object.assign(o, { year: "numeric", month: "numeric", day: "numeric" });
      }
      o.hour12 = options.hour12 ?? (options.hourCycle ? options.hourCycle === "h12" || options.hourCycle === "h11" : true);
      this.#o = o;
    }
    formatToParts(date = Date.now()) {
      const d = new Date(typeof date === "object" ? date.valueOf() : date);
      if (Number.isNaN(d.getTime())) throw new RangeError("Intl.DateTimeFormat: invalid time value");
      const o = this.#o;
      const parts = [];
      const lit = (v) => parts.push({ type: "literal", value: v });
      const part = (type, value) => parts.push({ type, value: String(value) });
      const y = d.getUTCFullYear(), m = d.getUTCMonth(), day = d.getUTCDate();
      const textMonth = o.month === "long" || o.month === "short" || o.month === "narrow";
      const monthText = o.month === "long" ? months[m] : o.month === "short" ? months[m].slice(0, 3) : o.month === "narrow" ? months[m][0] : o.month === "2-digit" ? pad(m + 1) : String(m + 1);
      const yearText = o.year === "2-digit" ? pad(y % 100) : String(y);
      const dayText = o.day === "2-digit" ? pad(day) : String(day);
      if (o.weekday) {
        const w = days[d.getUTCDay()];
        part("weekday", o.weekday === "long" ? w : o.weekday === "short" ? w.slice(0, 3) : w[0]);
        if (o.year || o.month || o.day) lit(", ");
      }
      if (textMonth) {
        if (o.month) part("month", monthText);
        if (o.day) { if (o.month) lit(" "); part("day", dayText); }
        if (o.year) { if (o.month || o.day) lit(o.day ? ", " : " "); part("year", yearText); }
      } else {
        const seq = [];
        if (o.month) seq.push(["month", monthText]);
        if (o.day) seq.push(["day", dayText]);
        if (o.year) seq.push(["year", yearText]);
        seq.forEach(([t, v], i) => { if (i) lit("/"); part(t, v); });
      }
      if (o.hour || o.minute || o.second) {
        if (parts.length) lit(o.dateStyle && (o.dateStyle === "full" || o.dateStyle === "long") ? " at " : ", ");
        let h = d.getUTCHours();
        const ampm = h < 12 ? "AM" : "PM";
        if (o.hour12) h = h % 12 || 12;
        if (o.hour) part("hour", o.hour === "2-digit" || !o.hour12 ? pad(h) : h);
        if (o.minute) { if (o.hour) lit(":"); part("minute", o.hour ? pad(d.getUTCMinutes()) : d.getUTCMinutes()); }
        if (o.second) { if (o.hour || o.minute) lit(":"); part("second", o.hour || o.minute ? pad(d.getUTCSeconds()) : d.getUTCSeconds()); }
        if (o.fractionalSecondDigits) { lit("."); part("fractionalSecond", pad(d.getUTCMilliseconds(), 3).slice(0, o.fractionalSecondDigits)); }
        if (o.hour && o.hour12) { lit(" "); part("dayPeriod", ampm); }
      }
      if (o.timeZoneName) { lit(" "); part("timeZoneName", o.timeZoneName === "long" ? "Coordinated Universal Time" : "UTC"); }
      return parts;
    }
    format(date) { return this.formatToParts(date).map((p) => p.value).join(""); }
    formatRange(a, b) { return `${this.format(a)} – ${this.format(b)}`; }
    resolvedOptions() { return { locale, calendar: "gregory", numberingSystem: "latn", ...this.#o }; }
    static supportedLocalesOf(l) { return supported(l); }
  }

  // x to digits decimals, half away from zero, on x's shortest decimal form (as ECMA-402 does:
  // 1.005 is "1.01", where toFixed's binary value gives "1.00").
  function toDecimal(x, digits) {
    let s = String(x);
    if (/e/.test(s)) return x.toFixed(digits);
    let [int, frac = ""] = s.split(".");
    if (frac.length <= digits) return digits ? `${int}.${frac.padEnd(digits, "0")}` : int;
    const up = frac.charCodeAt(digits) >= 53; // "5"
    let kept = (int + frac.slice(0, digits)).split("").map(Number);
    if (up) {
      let i = kept.length - 1;
      while (i >= 0 && kept[i] === 9) kept[i--] = 0;
      if (i < 0) kept.unshift(1);
      else kept[i]++;
    }
    const all = kept.join("");
    const intLen = all.length - digits;
    return digits ? `${all.slice(0, intLen)}.${all.slice(intLen)}` : all;
  }
  const symbols = { USD: "$", EUR: "€", GBP: "£", JPY: "¥", CNY: "CN¥", INR: "₹", CAD: "CA$", AUD: "A$", CHF: "CHF", KRW: "₩", BRL: "R$", MXN: "MX$" };
  const minorUnits = { JPY: 0, KRW: 0, CLP: 0, VND: 0, ISK: 0, HUF: 2, BHD: 3, KWD: 3, OMR: 3, JOD: 3, TND: 3 };
  class NumberFormat {
    #o;
    constructor(locales, options = {}) {
      options = options ?? {};
      const style = options.style ?? "decimal";
      if (!["decimal", "percent", "currency", "unit"].includes(style)) throw new RangeError(`Intl.NumberFormat: style ${style} is not supported`);
      if (style === "currency" && !options.currency) throw new TypeError("Intl.NumberFormat: currency style needs a currency code");
      const currency = options.currency ? String(options.currency).toUpperCase() : undefined;
      const cur = currency === undefined ? undefined : minorUnits[currency] ?? 2;
      const minF = options.minimumFractionDigits ?? (style === "currency" ? Math.min(cur, options.maximumFractionDigits ?? cur) : 0);
      const maxF = options.maximumFractionDigits ?? Math.max(minF, style === "currency" ? cur : style === "percent" ? 0 : 3);
      if (minF > maxF || maxF > 100) throw new RangeError("Intl.NumberFormat: maximumFractionDigits is out of range");
      this.#o = {
        locale, numberingSystem: "latn", style, currency, currencyDisplay: options.currencyDisplay ?? "symbol", unit: options.unit, unitDisplay: options.unitDisplay ?? "short",
        minimumIntegerDigits: options.minimumIntegerDigits ?? 1, minimumFractionDigits: minF, maximumFractionDigits: maxF,
        maximumSignificantDigits: options.maximumSignificantDigits, useGrouping: options.useGrouping ?? "auto", notation: options.notation ?? "standard",
        signDisplay: options.signDisplay ?? "auto",
      };
    }
    formatToParts(n) {
      const o = this.#o;
      const parts = [];
      let x = typeof n === "bigint" ? Number(n) : Number(n);
      if (o.style === "percent") x *= 100;
      const neg = x < 0 || Object.is(x, -0);
      if (neg && o.signDisplay !== "never") parts.push({ type: "minusSign", value: "-" });
      else if (o.signDisplay === "always" || (o.signDisplay === "exceptZero" && x !== 0)) parts.push({ type: "plusSign", value: "+" });
      if (o.style === "currency" && o.currencyDisplay !== "code" && o.currencyDisplay !== "name") parts.push({ type: "currency", value: symbols[o.currency] ?? o.currency });
      if (o.style === "currency" && o.currencyDisplay === "code") parts.push({ type: "currency", value: o.currency }, { type: "literal", value: "\u00a0" });
      x = Math.abs(x);
      if (!Number.isFinite(x)) parts.push({ type: Number.isNaN(x) ? "nan" : "infinity", value: Number.isNaN(x) ? "NaN" : "∞" });
      else {
        let compact = "";
        if (o.notation === "compact") {
          for (const [v, s] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]]) if (x >= v) { x /= v; compact = s; break; }
        }
        let text = o.maximumSignificantDigits ? String(Number(x.toPrecision(o.maximumSignificantDigits))) : o.notation === "compact" && o.maximumFractionDigits === 3 ? String(Number(x.toFixed(x < 10 && compact ? 1 : 0))) : toDecimal(x, o.maximumFractionDigits);
        let [int, frac = ""] = text.split(".");
        frac = frac.replace(/0+$/, "");
        while (frac.length < o.minimumFractionDigits) frac += "0";
        int = int.padStart(o.minimumIntegerDigits, "0");
        const group = o.useGrouping === false ? false : o.useGrouping === "min2" ? int.length > 4 : true;
        const groups = group ? int.replace(/\B(?=(\d{3})+(?!\d))/g, ",").split(",") : [int];
        groups.forEach((gr, i) => {
          if (i) parts.push({ type: "group", value: "," });
          parts.push({ type: "integer", value: gr });
        });
        if (frac) parts.push({ type: "decimal", value: "." }, { type: "fraction", value: frac });
        if (compact) parts.push({ type: "compact", value: compact });
      }
      if (o.style === "percent") parts.push({ type: "percentSign", value: "%" });
      if (o.style === "currency" && o.currencyDisplay === "name") parts.push({ type: "literal", value: " " }, { type: "currency", value: o.currency });
      if (o.style === "unit" && o.unit) parts.push({ type: "literal", value: " " }, { type: "unit", value: o.unit });
      return parts;
    }
    format(n) { return this.formatToParts(n).map((p) => p.value).join(""); }
    resolvedOptions() { return { ...this.#o }; }
    static supportedLocalesOf(l) { return supported(l); }
  }

  class PluralRules {
    #type;
    constructor(locales, options = {}) { this.#type = options?.type ?? "cardinal"; }
    select(n) {
      n = Number(n);
      if (this.#type === "ordinal") {
        const a = n % 10, b = n % 100;
        return a === 1 && b !== 11 ? "one" : a === 2 && b !== 12 ? "two" : a === 3 && b !== 13 ? "few" : "other";
      }
      return n === 1 ? "one" : "other";
    }
    resolvedOptions() { return { locale, type: this.#type }; }
    static supportedLocalesOf(l) { return supported(l); }
  }

  const supported = (l) => [].concat(l ?? []).filter((x) => /^en(-US)?$/i.test(String(x)));
  const Intl = {
    DateTimeFormat, NumberFormat, PluralRules,
    getCanonicalLocales: (l) => [].concat(l ?? []).map((x) => String(x).replace(/_/g, "-")),
    supportedValuesOf: (key) => (key === "timeZone" ? ["UTC"] : key === "currency" ? Object.keys(symbols) : []),
  };
  Object.defineProperty(Intl, Symbol.toStringTag, { value: "Intl" });
  define(g, "Intl", Intl);
  // toLocaleString and its kin go through the same formats.
  define(Number.prototype, "toLocaleString", function toLocaleString(locales, options) { return new NumberFormat(locales, options).format(this); });
  define(Date.prototype, "toLocaleDateString", function toLocaleDateString(locales, options) { return new DateTimeFormat(locales, options ?? { year: "numeric", month: "numeric", day: "numeric" }).format(this); });
  define(Date.prototype, "toLocaleTimeString", function toLocaleTimeString(locales, options) { return new DateTimeFormat(locales, options ?? { hour: "numeric", minute: "2-digit", second: "2-digit" }).format(this); });
  define(Date.prototype, "toLocaleString", function toLocaleString(locales, options) { return new DateTimeFormat(locales, options ?? { year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit" }).format(this); });
}
