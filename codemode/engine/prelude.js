// The JS-side API of a Code Mode program. Evaluated once per fresh context, before the
// program. Every function here is named `__cm_*` so error stacks can drop prelude frames.
//
// The context has two host functions, hidden from the program (codemode/engine/_qjs.c):
//   hostCall(kind, id, name, payloadJson, size)  answered at once, on this thread, with
//       the GIL: "t"/"j"/"e" + the result's text, JSON or error JSON ("call" of an inline
//       tool, "sync" for searchTools / describeTool / store.*), or "q": post it instead
//   postCall(id, name, payloadJson, size)  a tool call for the event loop, no GIL; its
//       result comes back through __cm_settle
// Everything else waits in a message queue that the host drains whenever the program is idle:
//   ["timer", id, delayMs] / ["untimer", id]
//   ["done", ok, valueText, errorJson]
(function __cm_prelude(global) {
  "use strict";

  // Intrinsics captured before the program can replace them.
  const JSONstringify = JSON.stringify;
  const JSONparse = JSON.parse;
  const ObjectFreeze = Object.freeze;
  const ObjectCreate = Object.create;
  const ObjectDefineProperty = Object.defineProperty;
  const ObjectKeys = Object.keys;
  const ObjectGetPrototypeOf = Object.getPrototypeOf;
  const ObjectPrototype = Object.prototype;
  const ArrayIsArray = Array.isArray;
  const ArrayPrototype = Array.prototype;
  const StringCtor = String;
  const StringSlice = String.prototype.slice;
  const StringIndexOf = String.prototype.indexOf;
  const StringIsWellFormed = String.prototype.isWellFormed;
  const StringToWellFormed = String.prototype.toWellFormed;
  const NumberIsFinite = Number.isFinite;
  const MathRound = Math.round;
  const PromiseCtor = Promise;
  const PromiseResolve = Promise.resolve;
  const PromiseReject = Promise.reject;
  const MapCtor = Map;
  const MapGet = Map.prototype.get;
  const MapSet = Map.prototype.set;
  const MapDelete = Map.prototype.delete;
  const MapHas = Map.prototype.has;
  const PromiseThen = Promise.prototype.then;
  const SetCtor = Set;
  const SetAdd = Set.prototype.add;
  const SetHas = Set.prototype.has;
  const SetDelete = Set.prototype.delete;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const ReflectApply = Reflect.apply;
  const ArrayJoin = Array.prototype.join;
  const ArrayPush = Array.prototype.push;
  const ArrayShift = Array.prototype.shift;
  const WeakSetCtor = WeakSet;
  const WeakSetAdd = WeakSet.prototype.add;
  const WeakSetHas = WeakSet.prototype.has;
  const SymbolSpecies = Symbol.species;
  const MapForEach = Map.prototype.forEach;

  // The host functions (above), put here by the bridge and taken out of the program's reach
  // before it runs.
  const hostCall = global.__cm_host_call;
  const postCall = global.__cm_post_call;
  // encodeArgs(value, Object.prototype, Array.prototype): plain data's JSON, checked and
  // written in one native pass that runs none of the program's code, or undefined (see
  // __cm_call_tool).
  const encodeArgs = global.__cm_encode_args;
  delete global.__cm_host_call;
  delete global.__cm_post_call;
  delete global.__cm_encode_args;
  // Tools whose calls hostCall answers at once (inline=True, set in __cm_start): the rest
  // are posted to the event loop.
  let inlineJson = "[]";
  let inlineNames = null;  // Set, parsed from inlineJson at the first call

  const pending = new MapCtor();   // call id -> {resolve, reject, name}
  let outbox = [];  // messages to the host, each one JSON text (see __cm_post)
  let prints = [];
  let printBytes = 0;
  const timers = new MapCtor();    // timer id -> {fn, args}
  let nextCallId = 1;
  let nextTimerId = 1;
  // Tool-call data the host holds for this program: arguments of the calls not yet settled
  // (JSON characters). The host sets the limit in __cm_start; results are checked host-side.
  let toolDataLimit = Infinity;
  let argsHeld = 0;
  // Calls the host holds at once for this program (running or waiting); set in __cm_start.
  let callsLimit = Infinity;
  // The promises of tool and store calls, so a printed one can say whether it is pending.
  // (A subclass could also tell which calls were never awaited, but `await` on a non-native
  // promise takes an extra `then` and job: ~10 us a call, measured in bench_engine.)
  const calls = new WeakSetCtor();
  const settledCalls = new WeakSetCtor();

  // Calls of tools that declare they change things (destructive: the host names them in
  // __cm_start) return a TrackedCall. Its `then`, which `await`, Promise.all/race and .catch/.finally all
  // reach, notes that the program looked at the result; a call that settled and was never
  // looked at is reported when the program ends as what it did (a background start with its
  // process id, a file written). The subclass costs extra jobs per await (~14 us a call), so
  // every other tool keeps native promises.
  let effectfulJson = "[]";
  let effectful = null;  // Set of tool names, parsed from effectfulJson at the first call
  const effectCalls = new MapCtor();  // call id -> promise, for the end-of-program report
  const observedCalls = new WeakSetCtor();
  class __cm_TrackedCall extends PromiseCtor {
    static get [SymbolSpecies]() { return PromiseCtor; }
    then(onFulfilled, onRejected) {
      ReflectApply(WeakSetAdd, observedCalls, [this]);
      return ReflectApply(PromiseThen, this, [onFulfilled, onRejected]);
    }
  }

  function __cm_new_call(name, tracked = false) {
    // A call's promise and its entry ({resolve, reject, ...}), the promise remembered as a call's.
    // `site` keeps where the program made the call, so a rejection it does not catch names the
    // line:column of the call in the program's source (~1 us a call). `__cm_to_host` makes it,
    // only for a call that fails or settles later: one that succeeds at once (an inline tool)
    // never needs it.
    const entry = { resolve: null, reject: null, name, size: 0, promise: null, site: null };
    const executor = function __cm_call_executor(resolve, reject) {
      entry.resolve = resolve;
      entry.reject = reject;
    };
    entry.promise = tracked ? new __cm_TrackedCall(executor) : new PromiseCtor(executor);
    ReflectApply(WeakSetAdd, calls, [entry.promise]);
    return entry;
  }

  function __cm_is_effectful(name) {
    if (effectful === null) effectful = new SetCtor(JSONparse(effectfulJson));
    return ReflectApply(SetHas, effectful, [name]);
  }

  function __cm_is_inline(name) {
    if (inlineNames === null) inlineNames = new SetCtor(JSONparse(inlineJson));
    return ReflectApply(SetHas, inlineNames, [name]);
  }

  function __cm_report() {
    // At the end: the calls still pending ([id, name]) and the ids of the tracked calls that
    // settled while nothing ever looked at their promise.
    const pendingCalls = [];
    ReflectApply(MapForEach, pending, [function __cm_note_pending(entry, id) {
      ReflectApply(ArrayPush, pendingCalls, [[id, entry.name]]);
    }]);
    const unobserved = [];
    ReflectApply(MapForEach, effectCalls, [function __cm_check_call(promise, id) {
      if (ReflectApply(WeakSetHas, settledCalls, [promise]) && !ReflectApply(WeakSetHas, observedCalls, [promise])) {
        ReflectApply(ArrayPush, unobserved, [id]);
      }
    }]);
    return __cm_encode({ pending: pendingCalls, unobserved }, false);  // no toJSON of the program's
  }


  class __cm_ToolError extends ErrorCtor {
    constructor(tool, message, data, code) {
      super(message);
      // Defined, not assigned: a setter the program put on Error.prototype must not eat them.
      ObjectDefineProperty(this, "name", { value: "ToolError", writable: true, configurable: true });
      ObjectDefineProperty(this, "tool", { value: tool, writable: true, enumerable: true, configurable: true });
      ObjectDefineProperty(this, "data", {
        value: data === undefined ? null : data, writable: true, enumerable: true, configurable: true,
      });
      // What kind of failure (codemode.errors.ErrorCode): unknown_tool, invalid_arguments, ...
      ObjectDefineProperty(this, "code", {
        value: code === undefined ? "tool_failed" : code, writable: true, enumerable: true, configurable: true,
      });
    }
  }

  // ---- messages to the host ----
  // Every message is JSON text built here from primitives (JSON.stringify never consults
  // `toJSON` for a primitive) and argument JSON made by one of the encoders below, so no
  // prototype change of the program's can alter it.
  function __cm_q(value) {
    return value === undefined ? "null" : JSONstringify(value);
  }

  function __cm_post(text) {
    ReflectApply(ArrayPush, outbox, [text]);
  }

  function __cm_to_host(entry, kind, id, name, payloadJson, size) {
    // One call or sync operation to the host: its kind ("call" or "sync"), id, name, payload
    // (JSON text: a call's arguments, a sync operation's [a, b]) and the arguments' size.
    // Called straight from the function the program called (__cm_call_tool, __cm_sync), so
    // the call site's stack, made here, holds the same prelude frames whichever called. Text
    // crosses whole (U+0000 included); a lone surrogate in a name becomes U+FFFD.
    if (kind === "sync") {
      const reply = hostCall(kind, id, name, payloadJson, size);
      const tag = reply[0];
      if (tag === "e") entry.site = new ErrorCtor();
      __cm_settle(id, tag !== "e", ReflectApply(StringSlice, reply, [1]), tag === "t");
      return;
    }
    // `site` is made only for a call that settles later (or fails): ~1 us a call.
    entry.site = new ErrorCtor();
    postCall(id, name, payloadJson, size);
  }

  // Sizes as the host's messages write them (_size_text in _program.py).
  function __cm_size_text(size) {
    if (size < 104857) return `${size} bytes`;
    const tenths = MathRound(size * 10 / 1048576);
    const rest = tenths % 10;
    return rest === 0 ? `${(tenths - rest) / 10} MiB` : `${(tenths - rest) / 10}.${rest} MiB`;
  }

  function __cm_data_limit_error(name, size) {
    const held = argsHeld > 0 ? ` while the calls in flight hold ${__cm_size_text(argsHeld)}` : "";
    const message = `tools.${name}: its arguments are ${__cm_size_text(size)} of JSON${held}, more than ` +
      `the ${__cm_size_text(toolDataLimit)} of tool-call data the host holds for one program; pass ` +
      "smaller pieces (a path, an id or a range instead of the data itself)" +
      (argsHeld > 0 ? ", or await calls one at a time instead of starting them all at once" : "");
    return new ToolError(name, message, {
      error: "tool_data_limit", limit_bytes: toolDataLimit, call_bytes: size, held_bytes: argsHeld,
    }, "tool_data_limit");
  }

  // ---- JSON encoding that the program's prototype changes cannot redirect ----
  // JSON.stringify consults `toJSON` on every object, so `Object.prototype.toJSON = ...` in a
  // program would rewrite the host's messages and the arguments of every tool call. This
  // encoder honours a `toJSON` of the value's own kind (Date, a class of the program's) but
  // ignores one inherited from Object.prototype or Array.prototype. Primitives still go
  // through JSON.stringify, which never looks up `toJSON` on them.
  // Python cannot hold a lone surrogate in UTF-8 text: such strings cross as U+FFFD.
  function __cm_well_formed(text) {
    return ReflectApply(StringIsWellFormed, text, []) ? text : ReflectApply(StringToWellFormed, text, []);
  }

  function __cm_encode(value, useToJSON) {
    if (value === null) return "null";
    const t = typeof value;
    if (t === "string") return JSONstringify(__cm_well_formed(value));
    if (t === "boolean") return JSONstringify(value);
    if (t === "number") return NumberIsFinite(value) ? JSONstringify(value) : "null";
    if (t !== "object") return "null";
    if (useToJSON) {
      const toJSON = value.toJSON;
      if (typeof toJSON === "function" && toJSON !== ObjectPrototype.toJSON && toJSON !== ArrayPrototype.toJSON) {
        return __cm_encode(ReflectApply(toJSON, value, [""]), false);
      }
    }
    const parts = [];
    if (ArrayIsArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const v = value[i];
        ReflectApply(ArrayPush, parts, [v === undefined || typeof v === "function" ? "null" : __cm_encode(v, true)]);
      }
      return "[" + ReflectApply(ArrayJoin, parts, [","]) + "]";
    }
    const keys = ObjectKeys(value);
    for (let i = 0; i < keys.length; i++) {
      const v = value[keys[i]];
      const kind = typeof v;
      if (v === undefined || kind === "function" || kind === "symbol") continue;
      ReflectApply(ArrayPush, parts, [JSONstringify(__cm_well_formed(keys[i])) + ":" + __cm_encode(v, true)]);
    }
    return "{" + ReflectApply(ArrayJoin, parts, [","]) + "}";
  }

  // ---- JSON checking: arguments must be plain JSON, with a path when they are not ----
  function __cm_describe(value) {
    if (typeof value === "function") return "a function";
    if (typeof value === "bigint") return "a BigInt";
    if (typeof value === "symbol") return "a Symbol";
    if (value === undefined) return "undefined";
    if (typeof value === "number") return StringCtor(value);
    return typeof value;
  }

  function __cm_check_json(value, path, seen) {
    const t = typeof value;
    if (value === null || t === "string" || t === "boolean") return null;
    if (t === "number") {
      return NumberIsFinite(value) ? null : `${path} is ${StringCtor(value)}, which JSON cannot carry`;
    }
    if (t === "function" || t === "bigint" || t === "symbol" || t === "undefined") {
      return `${path} is ${__cm_describe(value)}, which JSON cannot carry`;
    }
    if (ReflectApply(SetHas, seen, [value])) return `${path} refers back to itself (a cycle)`;
    ReflectApply(SetAdd, seen, [value]);
    try {
      if (ArrayIsArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const problem = __cm_check_json(value[i], `${path}[${i}]`, seen);
          if (problem) return problem;
        }
        return null;
      }
      if (value instanceof PromiseCtor) {
        return `${path} is a Promise: did you forget \`await\`? (await the call that made it, then pass its result)`;
      }
      const proto = ObjectGetPrototypeOf(value);
      if (proto !== ObjectPrototype && proto !== null && typeof value.toJSON !== "function") {
        const kind = (value.constructor && value.constructor.name) || "object";
        if (kind === "Map" || kind === "Set" || kind === "WeakMap" || kind === "WeakSet" || kind === "Promise") {
          return `${path} is a ${kind}, which JSON cannot carry (convert it, e.g. Object.fromEntries or [...set])`;
        }
      }
      for (const key of ObjectKeys(value)) {
        const v = value[key];
        if (v === undefined) continue; // dropped by JSON, like JSON.stringify does
        const problem = __cm_check_json(v, `${path}.${key}`, seen);
        if (problem) return problem;
      }
      return null;
    } finally {
      ReflectApply(SetDelete, seen, [value]);
    }
  }

  // ---- printing ----
  function __cm_format(value) {
    if (typeof value === "string") return value;
    if (value === undefined) return "undefined";
    if (typeof value === "function") return `[Function ${value.name || "anonymous"}]`;
    if (typeof value === "bigint") return `${StringCtor(value)}n`;
    if (typeof value === "symbol") return StringCtor(value);
    if (value instanceof PromiseCtor) return __cm_promise_text(value);
    if (value instanceof ErrorCtor) {
      const base = `${value.name}: ${value.message}`;
      if (value instanceof ToolError && value.data !== null) {
        return `${base} ${__cm_format(value.data)}`;
      }
      return base;
    }
    try {
      const seen = new SetCtor();
      const text = JSONstringify(value, function __cm_replacer(key, v) {
        if (typeof v === "bigint") return `${StringCtor(v)}n`;
        if (typeof v === "function") return `[Function ${v.name || "anonymous"}]`;
        if (typeof v === "object" && v !== null) {
          if (ReflectApply(SetHas, seen, [v])) return "[Circular]";
          ReflectApply(SetAdd, seen, [v]);
          if (v instanceof PromiseCtor) return __cm_promise_text(v);
          if (v instanceof MapCtor) return { "[Map]": [...v] };
          if (v instanceof SetCtor) return { "[Set]": [...v] };
        }
        return v;
      });
      return text === undefined ? StringCtor(value) : text;
    } catch (e) {
      return StringCtor(value);
    }
  }

  function __cm_print(...args) {
    const parts = [];
    for (let i = 0; i < args.length; i++) ReflectApply(ArrayPush, parts, [__cm_format(args[i])]);
    const text = __cm_well_formed(ReflectApply(ArrayJoin, parts, [" "])) + "\n";
    ReflectApply(ArrayPush, prints, [text]);
    printBytes += text.length;
  }

  // ---- tool calls ----
  function __cm_call_tool(name, args) {
    const tracked = __cm_is_effectful(name);
    if (args === undefined) args = {};
    let argsJson = encodeArgs(args, ObjectPrototype, ArrayPrototype);
    if (argsJson === undefined) {  // not plain data: checked, with the path of what JSON cannot carry
      const problem = __cm_check_json(args, "arguments", new SetCtor());
      if (problem) {
        return __cm_failed_call(name, tracked, new ToolError(name, `tools.${name}: ${problem}. Arguments must be JSON: objects, arrays, strings, finite numbers, booleans, null.`, null, "invalid_arguments"));
      }
      try {
        argsJson = __cm_encode(args, true);
      } catch (e) {
        return __cm_failed_call(name, tracked, new ToolError(name, `tools.${name}: arguments cannot be turned into JSON: ${e.message}`, null, "invalid_arguments"));
      }
    }
    const size = argsJson.length;
    if (argsHeld + size > toolDataLimit) {
      return __cm_failed_call(name, tracked, __cm_data_limit_error(name, size));
    }
    if (pending.size >= callsLimit) {
      return __cm_failed_call(name, tracked, new ToolError(name, `tools.${name}: ${callsLimit} calls of this ` +
        "program are in flight, the most the host holds for one program; await calls before starting more " +
        "(e.g. Promise.all over batches)", { error: "tool_data_limit", limit_calls: callsLimit }, "tool_data_limit"));
    }
    if (!tracked && __cm_is_inline(name)) {
      // Answered at once on this thread: a settled promise, with no entry to keep (~2 us less).
      const id = nextCallId++;
      const reply = hostCall("call", id, name, argsJson, size);
      const tag = reply[0];
      if (tag !== "q") {
        let promise;
        if (tag === "e") {
          const err = JSONparse(ReflectApply(StringSlice, reply, [1]));
          const error = new ToolError(name, err.message, err.data === undefined ? null : err.data, err.code);
          __cm_at_site(error, new ErrorCtor());
          promise = ReflectApply(PromiseReject, PromiseCtor, [error]);
        } else {
          const payload = ReflectApply(StringSlice, reply, [1]);
          promise = ReflectApply(PromiseResolve, PromiseCtor, [tag === "t" ? payload : JSONparse(payload)]);
        }
        ReflectApply(WeakSetAdd, settledCalls, [promise]);  // (a settled call's: __cm_promise_text)
        return promise;
      }
      // "q": it must go through the loop (it needs a decision): posted below, with its id.
      const entry = __cm_new_call(name, tracked);
      __cm_track(entry, id, size);
      entry.site = new ErrorCtor();
      postCall(id, name, argsJson, size);
      return entry.promise;
    }
    const entry = __cm_new_call(name, tracked);
    const id = nextCallId++;
    __cm_track(entry, id, size);
    if (tracked) ReflectApply(MapSet, effectCalls, [id, entry.promise]);
    __cm_to_host(entry, "call", id, name, argsJson, size);
    return entry.promise;
  }

  function __cm_track(entry, id, size) {
    // A call that settles later: its arguments count as held until then.
    argsHeld += size;
    entry.size = size;
    ReflectApply(MapSet, pending, [id, entry]);
  }

  function __cm_failed_call(name, tracked, error) {
    // A call refused before it reached the host: a rejected promise, remembered as a call's.
    const entry = __cm_new_call(name, tracked);
    entry.reject(error);
    return entry.promise;
  }


  const ToolError = __cm_ToolError;
  const toolsTarget = ObjectCreate(null);
  // tools.<server>.<tool>(args): an upstream MCP server's tools are named "server.tool".
  let namespacesJson = "[]";
  let namespaces = null;  // name -> frozen proxy, made at the first access
  function __cm_namespace(key) {
    if (namespaces === null) {
      namespaces = new MapCtor();
      for (const name of JSONparse(namespacesJson)) ReflectApply(MapSet, namespaces, [name, null]);
    }
    if (!ReflectApply(MapHas, namespaces, [key])) return undefined;
    let space = ReflectApply(MapGet, namespaces, [key]);
    if (space === null) {
      space = new Proxy(ObjectCreate(null), {
        get: function __cm_ns_get(target, sub) {
          if (typeof sub !== "string" || sub === "then") return undefined;
          const name = key + "." + sub;
          return function __cm_tool(args) { return __cm_call_tool(name, args); };
        },
        set: function __cm_ns_set() { return false; },
        defineProperty: function __cm_ns_define() { return false; },
        deleteProperty: function __cm_ns_delete() { return false; },
        setPrototypeOf: function __cm_ns_proto() { return false; },
        ownKeys: function __cm_ns_keys() { return __cm_listed(key + "."); },
        getOwnPropertyDescriptor: function __cm_ns_own(target, sub) {
          return __cm_listed_descriptor(space, key + ".", sub);
        },
      });
      ReflectApply(MapSet, namespaces, [key, space]);
    }
    return space;
  }
  // Object.keys(tools), for...in: the tool names and namespaces, asked of the host at the
  // first listing (a program that never lists pays nothing).
  let toolNames = null;
  function __cm_tool_names() {
    if (toolNames === null) {
      const reply = hostCall("sync", nextCallId++, "toolNames", "[null,null]", 0);
      toolNames = reply[0] === "j" ? JSONparse(ReflectApply(StringSlice, reply, [1])) : [];
    }
    return toolNames;
  }
  function __cm_listed(prefix) {
    // The own keys under `prefix` ("" for tools itself, "server." in a namespace), sorted.
    const seen = new SetCtor();
    const keys = [];
    for (const name of __cm_tool_names()) {
      if (prefix !== "" && ReflectApply(StringSlice, name, [0, prefix.length]) !== prefix) continue;
      const rest = ReflectApply(StringSlice, name, [prefix.length]);
      const dot = prefix === "" ? ReflectApply(StringIndexOf, rest, ["."]) : -1;
      const key = dot < 0 ? rest : ReflectApply(StringSlice, rest, [0, dot]);
      if (!ReflectApply(SetHas, seen, [key])) {
        ReflectApply(SetAdd, seen, [key]);
        ReflectApply(ArrayPush, keys, [key]);
      }
    }
    return keys;
  }
  function __cm_listed_descriptor(owner, prefix, key) {
    if (typeof key !== "string" || !ReflectApply(SetHas, new SetCtor(__cm_listed(prefix)), [key])) return undefined;
    return { value: owner[key], writable: false, enumerable: true, configurable: true };
  }
  const tools = new Proxy(toolsTarget, {
    get: function __cm_tools_get(target, key) {
      if (typeof key !== "string" || key === "then") return undefined;
      if (namespacesJson !== "[]") {
        const space = __cm_namespace(key);
        if (space !== undefined) return space;
      }
      return function __cm_tool(args) { return __cm_call_tool(key, args); };
    },
    set: function __cm_tools_set() { return false; },
    defineProperty: function __cm_tools_define() { return false; },
    deleteProperty: function __cm_tools_delete() { return false; },
    setPrototypeOf: function __cm_tools_proto() { return false; },
    has: function __cm_tools_has(target, key) { return typeof key === "string"; },
    ownKeys: function __cm_tools_keys() { return __cm_listed(""); },
    getOwnPropertyDescriptor: function __cm_tools_own(target, key) {
      return __cm_listed_descriptor(tools, "", key);
    },
  });

  function __cm_sync(op, a, b) {
    const entry = __cm_new_call(op);
    const id = nextCallId++;
    ReflectApply(MapSet, pending, [id, entry]);
    __cm_to_host(entry, "sync", id, op, ReflectApply(ArrayJoin, ["[", __cm_q(a), ",", __cm_q(b), "]"], [""]), 0);
    return entry.promise;
  }

  function __cm_search_tools(query, limit) {
    return __cm_sync("searchTools", StringCtor(query === undefined ? "" : query), limit === undefined ? 10 : +limit);
  }

  function __cm_describe_tool(name) {
    const bad = __cm_key_error("describeTool", name, "tool name");
    if (bad) return __cm_rejected(bad);
    return __cm_sync("describeTool", name, null);
  }

  function __cm_rejected(error) {
    return new PromiseCtor(function __cm_reject_executor(resolve, reject) { reject(error); });
  }

  function __cm_key_error(op, key, what = "key") {
    if (typeof key === "string") return null;
    return new TypeErrorCtor(`${op}: the ${what} must be a string, got ${__cm_describe(key)}`);
  }

  const store = ObjectFreeze({
    get: function __cm_store_get(key) {
      const bad = __cm_key_error("store.get", key);
      return bad ? __cm_rejected(bad) : __cm_sync("store.get", key, null);
    },
    set: function __cm_store_set(key, value) {
      const bad = __cm_key_error("store.set", key);
      if (bad) return __cm_rejected(bad);
      const problem = __cm_check_json(value, "value", new SetCtor());
      if (problem) {
        return __cm_rejected(new TypeErrorCtor(`store.set(${JSONstringify(key)}): ${problem}`));
      }
      let json;
      try {
        json = __cm_encode(value, true);
      } catch (e) {
        return __cm_rejected(new TypeErrorCtor(`store.set(${JSONstringify(key)}): the value cannot be turned into JSON: ${e && e.message}`));
      }
      return __cm_sync("store.set", key, json);
    },
    delete: function __cm_store_delete(key) {
      const bad = __cm_key_error("store.delete", key);
      return bad ? __cm_rejected(bad) : __cm_sync("store.delete", key, null);
    },
    keys: function __cm_store_keys() { return __cm_sync("store.keys", null, null); },
  });

  // ---- timers (driven by the host's wait loop) ----
  function __cm_set_timeout(fn, delay, ...args) {
    if (typeof fn !== "function") throw new TypeErrorCtor("setTimeout: the first argument must be a function");
    const id = nextTimerId++;
    ReflectApply(MapSet, timers, [id, { fn, args }]);
    __cm_post(`["timer",${id},${NumberIsFinite(+delay) && +delay > 0 ? JSONstringify(+delay) : 0}]`);
    return id;
  }

  function __cm_clear_timeout(id) {
    if (ReflectApply(MapHas, timers, [id])) {
      ReflectApply(MapDelete, timers, [id]);
      __cm_post(`["untimer",${id}]`);
    }
  }


  // ---- images: image(data, mimeType) shows the model an image (base64 text or bytes) ----
  // The mime types taken and the magic bytes each must start with (offset, bytes).
  const IMAGE_MAGIC = new MapCtor([
    ["image/png", [[0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]]]],
    ["image/jpeg", [[0, [0xff, 0xd8, 0xff]]]],
    ["image/gif", [[0, [0x47, 0x49, 0x46, 0x38]]]],
    ["image/webp", [[0, [0x52, 0x49, 0x46, 0x46]], [8, [0x57, 0x45, 0x42, 0x50]]]],
  ]);
  const IMAGE_TYPES = "image/png, image/jpeg, image/gif, image/webp";
  const IMAGE_MAX_BYTES = 5 * 1024 * 1024;
  const IMAGE_MAX_COUNT = 8;
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const B64_RE = /^[A-Za-z0-9+/]*={0,2}$/;
  const Uint8ArrayCtor = Uint8Array;
  const ArrayBufferCtor = ArrayBuffer;
  const ArrayBufferIsView = ArrayBuffer.isView;
  const RegExpTest = RegExp.prototype.test;
  const StringFromCharCode = String.fromCharCode;
  const StringCharCodeAt = String.prototype.charCodeAt;
  const StringReplace = String.prototype.replace;
  let imageCount = 0;

  function __cm_image_error(message, code) {
    return new ToolError("image", `image: ${message}`, null, code);
  }

  function __cm_b64_encode(bytes) {
    const parts = [];
    const n = bytes.length;
    for (let start = 0; start < n; start += 49152) {
      const end = start + 49152 < n ? start + 49152 : n;
      const codes = [];
      let i = start;
      for (; i + 2 < end; i += 3) {
        const v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
        ReflectApply(ArrayPush, codes, [
          ReflectApply(StringCharCodeAt, B64, [v >> 18]), ReflectApply(StringCharCodeAt, B64, [(v >> 12) & 63]),
          ReflectApply(StringCharCodeAt, B64, [(v >> 6) & 63]), ReflectApply(StringCharCodeAt, B64, [v & 63]),
        ]);
      }
      let text = ReflectApply(StringFromCharCode, null, codes);
      if (i < end) {  // the last 1 or 2 bytes (only in the last chunk: 49152 is a multiple of 3)
        const v = (bytes[i] << 16) | ((i + 1 < end ? bytes[i + 1] : 0) << 8);
        text += B64[v >> 18] + B64[(v >> 12) & 63] + (i + 1 < end ? B64[(v >> 6) & 63] : "=") + "=";
      }
      ReflectApply(ArrayPush, parts, [text]);
    }
    return ReflectApply(ArrayJoin, parts, [""]);
  }

  function __cm_b64_head(text, count) {
    // The first `count` bytes of base64 text (enough to check the magic).
    const head = [];
    for (let i = 0; i + 3 < text.length && head.length < count; i += 4) {
      let v = 0;
      for (let j = 0; j < 4; j++) {
        const k = ReflectApply(StringIndexOf, B64, [text[i + j]]);
        v = (v << 6) | (k < 0 ? 0 : k);
      }
      ReflectApply(ArrayPush, head, [(v >> 16) & 255, (v >> 8) & 255, v & 255]);
    }
    return head;
  }

  function __cm_image_block(block) {
    // An image a tool returned ({type: "image", mimeType, bytes, ref}): its archived bytes,
    // base64, read by ref (the session's own); the checks below then apply as to base64 text.
    const reply = hostCall("sync", nextCallId++, "image.ref", `[${JSONstringify(block.ref)},null]`, 0);
    const payload = ReflectApply(StringSlice, reply, [1]);
    if (reply[0] !== "e") return JSONparse(payload);
    const err = JSONparse(payload);
    throw new ToolError("image", err.message, err.data === undefined ? null : err.data, err.code);
  }

  function __cm_image(data, mimeType) {
    const block = data !== null && typeof data === "object" && !ArrayIsArray(data) && data.type === "image"
      && typeof data.ref === "string";
    if (block && mimeType === undefined) mimeType = data.mimeType;
    if (ArrayIsArray(data)) {
      throw __cm_image_error("data is an array: pass one image block of it (r.find(b => b.type === \"image\"))", "invalid_arguments");
    }
    const magic = typeof mimeType === "string" ? ReflectApply(MapGet, IMAGE_MAGIC, [mimeType]) : undefined;
    if (magic === undefined) {
      throw __cm_image_error(`mimeType must be one of ${IMAGE_TYPES}, got ${__cm_format(mimeType)}`, "invalid_arguments");
    }
    if (imageCount >= IMAGE_MAX_COUNT) {
      throw __cm_image_error(`a program may show at most ${IMAGE_MAX_COUNT} images; show fewer (e.g. one combined image)`, "too_large");
    }
    let b64;
    let head;
    let size;
    if (block) data = __cm_image_block(data);
    if (typeof data === "string") {
      b64 = ReflectApply(StringReplace, data, [/\s+/g, ""]);
      if (b64.length % 4 !== 0 || !ReflectApply(RegExpTest, B64_RE, [b64])) {
        throw __cm_image_error("data is not base64 text (A-Z a-z 0-9 + /, = padding, length a multiple of 4); pass base64 or a Uint8Array", "invalid_arguments");
      }
      size = b64.length / 4 * 3 - (b64.length && b64[b64.length - 1] === "=" ? (b64[b64.length - 2] === "=" ? 2 : 1) : 0);
      head = __cm_b64_head(b64, 12);
    } else if (data instanceof Uint8ArrayCtor || data instanceof ArrayBufferCtor || ArrayBufferIsView(data)) {
      const bytes = data instanceof ArrayBufferCtor ? new Uint8ArrayCtor(data)
        : new Uint8ArrayCtor(data.buffer, data.byteOffset, data.byteLength);
      size = bytes.length;
      head = bytes;
      if (size <= IMAGE_MAX_BYTES) b64 = __cm_b64_encode(bytes);
    } else {
      throw __cm_image_error(`data must be base64 text, a Uint8Array, an ArrayBuffer or an image block a tool returned, got ${data === null ? "null" : typeof data}`, "invalid_arguments");
    }
    if (size > IMAGE_MAX_BYTES) {
      throw __cm_image_error(`the image is ${__cm_size_text(size)}, over the ${__cm_size_text(IMAGE_MAX_BYTES)} cap of one image; make it smaller`, "too_large");
    }
    for (let m = 0; m < magic.length; m++) {
      const offset = magic[m][0];
      const expected = magic[m][1];
      for (let i = 0; i < expected.length; i++) {
        if (head[offset + i] !== expected[i]) {
          throw __cm_image_error(`the bytes are not a ${mimeType} image (its magic bytes do not match); give the image's real type`, "invalid_arguments");
        }
      }
    }
    imageCount++;
    __cm_post(`["image",${JSONstringify(mimeType)},"${b64}"]`);
  }

  const consoleObj = ObjectFreeze({
    log: __cm_print, info: __cm_print, debug: __cm_print, warn: __cm_print, error: __cm_print,
  });

  const api = {
    tools, store, print: __cm_print, console: consoleObj, ToolError, image: __cm_image,
    searchTools: __cm_search_tools, describeTool: __cm_describe_tool,
    setTimeout: __cm_set_timeout, clearTimeout: __cm_clear_timeout,
    sleep: function __cm_sleep(ms) {
      return new PromiseCtor(function __cm_sleep_executor(resolve) { __cm_set_timeout(resolve, ms); });
    },
  };
  for (const key of ObjectKeys(api)) {
    ObjectDefineProperty(global, key, { value: api[key], writable: false, configurable: false, enumerable: false });
  }

  // ---- host entry points, returned to Python (never reachable from the program) ----
  function __cm_done(ok, value, errorJson) {
    __cm_post(`["done",${ok ? "true" : "false"},${__cm_q(value)},${__cm_q(errorJson)}]`);
  }

  function __cm_drain(force) {
    // Messages for the host; printed text waits for a message, for the program to go idle
    // (`force`), or for 1 MiB of it.
    if (outbox.length === 0 && (printBytes === 0 || (!force && printBytes < 1048576))) return "";
    // Each message is JSON text already.
    const text = ReflectApply(ArrayJoin, [
      "[", printBytes, ",[", ReflectApply(ArrayJoin, outbox, [","]), "]]",
    ], [""]);
    outbox = [];
    return text;
  }

  function __cm_take_output() {
    const text = ReflectApply(ArrayJoin, prints, [""]);
    prints = [];
    printBytes = 0;
    return text;
  }

  function __cm_take_chunk() {
    // Used after an out-of-memory error, when joining could fail: one piece at a time.
    if (prints.length === 0) { printBytes = 0; return null; }
    return ReflectApply(ArrayShift, prints, []);
  }

  function __cm_settle(id, ok, payload, isText) {
    const entry = ReflectApply(MapGet, pending, [id]);
    if (entry === undefined) return;
    ReflectApply(MapDelete, pending, [id]);
    argsHeld -= entry.size;
    ReflectApply(WeakSetAdd, settledCalls, [entry.promise]);
    if (ok) {
      entry.resolve(isText ? payload : JSONparse(payload));
    } else {
      const err = JSONparse(payload);
      const error = new ToolError(entry.name, err.message, err.data === undefined ? null : err.data, err.code);
      __cm_at_site(error, entry.site);
      entry.reject(error);
    }
  }

  function __cm_at_site(error, site) {
    // The error's stack becomes the call's: its own frames are the prelude's.
    const where = site !== null && typeof site.stack === "string" ? site.stack : "";
    ObjectDefineProperty(error, "stack", {
      value: `ToolError: ${error.message}\n${where}`, writable: true, configurable: true,
    });
  }

  function __cm_promise_text(value) {
    if (ReflectApply(WeakSetHas, settledCalls, [value])) return "Promise (settled): did you forget await?";
    if (ReflectApply(WeakSetHas, calls, [value])) return "Promise (pending): did you forget await?";
    return "Promise: did you forget await?";
  }

  function __cm_fire(id) {
    const entry = ReflectApply(MapGet, timers, [id]);
    if (entry === undefined) return;
    ReflectApply(MapDelete, timers, [id]);
    ReflectApply(entry.fn, undefined, entry.args);
  }

  function __cm_error_json(e) {
    // `thrown` says what kind of value was thrown when it is not an Error: QuickJS throws
    // `null` when it runs out of memory while building the error itself.
    try {
      if (e instanceof ErrorCtor || (e && typeof e === "object" && "message" in e)) {
        return __cm_encode({
          name: StringCtor(e.name || "Error"),
          message: StringCtor(e.message),
          stack: typeof e.stack === "string" ? e.stack : "",
          tool: e instanceof ToolError ? StringCtor(e.tool) : null,
          data: e instanceof ToolError ? __cm_format(e.data) : null,
          thrown: "error",
        }, false);
      }
      const thrown = e === null ? "null" : typeof e;
      return __cm_encode({ name: "Uncaught", message: __cm_format(e), stack: "", tool: null, data: null, thrown }, false);
    } catch (inner) {
      return __cm_encode({
        name: "Uncaught", message: "a value that cannot be inspected", stack: "", tool: null, data: null,
        thrown: "object",
      }, false);
    }
  }

  function __cm_unbalanced() {
    // The program closed the function it is wrapped in ("})" with no matching "{").
    __cm_done(false, "", __cm_encode({
      name: "SyntaxError",
      message: "unbalanced braces: the program closes a block it never opened; check its } and )",
      stack: "", tool: null, data: null, thrown: "error",
    }, false));
  }

  function __cm_start(main, dataLimit, callLimit, effectfulNamesJson, namespaceNamesJson, inlineNamesJson) {
    toolDataLimit = dataLimit;
    callsLimit = callLimit;
    inlineJson = inlineNamesJson;
    effectfulJson = effectfulNamesJson;
    namespacesJson = namespaceNamesJson;
    if (typeof main !== "function") {
      __cm_unbalanced();
      return;
    }
    let promise;
    try {
      promise = main();
    } catch (e) {
      __cm_done(false, "", __cm_error_json(e));
      return;
    }
    if (!(promise instanceof PromiseCtor)) {
      __cm_unbalanced();
      return;
    }
    ReflectApply(PromiseThen, promise, [
      function __cm_on_value(value) {
        let text = "";
        try {
          text = value === undefined ? "" : __cm_format(value);
        } catch (e) {
          text = "[the returned value cannot be printed]";
        }
        __cm_done(true, text, value === undefined ? "" : "value");
      },
      function __cm_on_error(e) { __cm_done(false, "", __cm_error_json(e)); },
    ]);
  }

  // The bridge takes these (and deletes them) once the prelude has run.
  global.__cm_start = __cm_start;
  global.__cm_settle = __cm_settle;
  global.__cm_fire = __cm_fire;
  global.__cm_drain = __cm_drain;
  global.__cm_take_output = __cm_take_output;
  global.__cm_take_chunk = __cm_take_chunk;
  global.__cm_report = __cm_report;
})(globalThis);
