//! Evaluation of a parsed snippet against a server's JSON, with JavaScript's semantics.

use super::syntax::{BinOp, Expr, Program};
use super::EvalError;
use crate::js::{js_le, js_lt, strict_eq, Js};

impl Program {
    /// The snippet's value for this server (`Err`: what JavaScript would have thrown).
    pub(super) fn run(&self, server: &Js) -> Result<Js, EvalError> {
        match &self.expr {
            None => Ok(Js::Undefined),
            Some(e) => eval(e, server).map(Val::into_js),
        }
    }
}

/// A value during evaluation: borrowed from the server (objects keep their identity) or made.
enum Val<'a> {
    Ref(&'a Js),
    Own(Js),
}

impl Val<'_> {
    fn js(&self) -> &Js {
        match self {
            Val::Ref(v) => v,
            Val::Own(v) => v,
        }
    }

    fn into_js(self) -> Js {
        match self {
            Val::Ref(v) => v.clone(),
            Val::Own(v) => v,
        }
    }
}

/// Same object (arrays and objects are equal only to themselves).
fn identical(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a, b) {
        (Val::Ref(x), Val::Ref(y)) => std::ptr::eq(*x, *y),
        _ => false,
    }
}

fn is_object(v: &Js) -> bool {
    matches!(v, Js::Obj(_) | Js::Arr(_))
}

fn strict_equals(a: &Val<'_>, b: &Val<'_>) -> bool {
    if is_object(a.js()) || is_object(b.js()) {
        return identical(a, b);
    }
    strict_eq(a.js(), b.js())
}

/// `ToPrimitive`: objects and arrays become their string form.
fn prim(v: &Js) -> Js {
    if is_object(v) {
        Js::Str(v.to_js_string().into())
    } else {
        v.clone()
    }
}

/// `==`.
fn loose_equals(a: &Val<'_>, b: &Val<'_>) -> bool {
    let (x, y) = (a.js(), b.js());
    match (x, y) {
        _ if is_object(x) && is_object(y) => identical(a, b),
        (Js::Undefined | Js::Null, Js::Undefined | Js::Null) => true,
        (Js::Undefined | Js::Null, _) | (_, Js::Undefined | Js::Null) => false,
        _ if is_object(x) => loose_equals(&Val::Own(prim(x)), b),
        _ if is_object(y) => loose_equals(a, &Val::Own(prim(y))),
        (Js::Str(_), Js::Str(_)) | (Js::Num(_), Js::Num(_)) | (Js::Bool(_), Js::Bool(_)) => strict_eq(x, y),
        // Mixed primitives compare as numbers (booleans and strings converted).
        _ => x.num() == y.num(),
    }
}

fn compare(op: BinOp, a: &Js, b: &Js) -> bool {
    let (a, b) = (prim(a), prim(b));
    match op {
        BinOp::Lt => js_lt(&a, &b),
        BinOp::Le => js_le(&a, &b),
        BinOp::Gt => js_lt(&b, &a),
        _ => js_le(&b, &a),
    }
}

/// `ToPropertyKey`.
fn property_key(v: &Js) -> String {
    v.to_js_string()
}

fn type_error_reading(base: &Js, key: &str) -> EvalError {
    EvalError(format!("Cannot read properties of {} (reading '{key}')", base.to_js_string()))
}

/// A canonical array index (`"0"`, `"12"`, not `"01"` or `"1.0"`).
fn array_index(key: &str) -> Option<usize> {
    key.parse::<usize>().ok().filter(|i| i.to_string() == key)
}

/// `base[key]`.
fn read<'a>(base: Val<'a>, key: &str) -> Result<Val<'a>, EvalError> {
    let undefined = Ok(Val::Own(Js::Undefined));
    match base {
        Val::Ref(Js::Obj(o)) => Ok(o.get(key).map_or(Val::Own(Js::Undefined), Val::Ref)),
        Val::Ref(Js::Arr(a)) if key != "length" => {
            Ok(array_index(key).and_then(|i| a.get(i)).map_or(Val::Own(Js::Undefined), Val::Ref))
        }
        base => match base.js() {
            Js::Undefined | Js::Null => Err(type_error_reading(base.js(), key)),
            Js::Obj(o) => Ok(Val::Own(o.get(key).cloned().unwrap_or_default())),
            Js::Arr(a) if key == "length" => Ok(Val::Own(Js::Num(a.len() as f64))),
            Js::Arr(a) => Ok(Val::Own(array_index(key).and_then(|i| a.get(i)).cloned().unwrap_or_default())),
            Js::Str(s) if key == "length" => Ok(Val::Own(Js::Num(s.encode_utf16().count() as f64))),
            Js::Str(s) => Ok(Val::Own(
                array_index(key)
                    .and_then(|i| s.encode_utf16().nth(i))
                    .map_or(Js::Undefined, |u| Js::Str(String::from_utf16_lossy(&[u]).into())),
            )),
            _ => undefined,
        },
    }
}

/// `ToIntegerOrInfinity`.
fn to_integer(v: &Js) -> f64 {
    let n = prim(v).num();
    if n.is_nan() {
        0.0
    } else {
        n.trunc()
    }
}

/// The start position `indexOf` uses for a list of `len` items.
fn start_index(from: Option<&Js>, len: usize, negative_from_end: bool) -> usize {
    let Some(from) = from else { return 0 };
    let n = to_integer(from);
    let len_f = len as f64;
    let start = if n < 0.0 && negative_from_end { (len_f + n).max(0.0) } else { n.max(0.0) };
    start.min(len_f) as usize
}

fn index_of(target: &Val<'_>, args: &[Val<'_>]) -> Result<Js, EvalError> {
    let search = args.first();
    let found = match target.js() {
        Js::Str(s) => {
            let hay: Vec<u16> = s.encode_utf16().collect();
            let needle: Vec<u16> =
                search.map_or_else(|| "undefined".to_string(), |v| v.js().to_js_string()).encode_utf16().collect();
            let start = start_index(args.get(1).map(Val::js), hay.len(), false);
            (start..=hay.len())
                .find(|&i| hay.len() - i >= needle.len() && hay[i..i + needle.len()] == needle[..])
                .map_or(-1.0, |i| i as f64)
        }
        Js::Arr(items) => {
            let start = start_index(args.get(1).map(Val::js), items.len(), true);
            let undefined = Val::Own(Js::Undefined);
            let wanted = search.unwrap_or(&undefined);
            items[start..]
                .iter()
                .position(|item| {
                    // Elements of a borrowed array keep their identity.
                    let item = match target {
                        Val::Ref(_) => Val::Ref(item),
                        Val::Own(_) => Val::Own(item.clone()),
                    };
                    strict_equals(&item, wanted)
                })
                .map_or(-1.0, |i| (start + i) as f64)
        }
        Js::Undefined | Js::Null => return Err(type_error_reading(target.js(), "indexOf")),
        other => return Err(EvalError(format!("{}.indexOf is not a function", other.type_of()))),
    };
    Ok(Js::Num(found))
}

fn eval<'a>(e: &Expr, server: &'a Js) -> Result<Val<'a>, EvalError> {
    Ok(match e {
        Expr::Server => Val::Ref(server),
        Expr::Lit(v) => Val::Own(v.clone()),
        Expr::Member(base, key) => {
            let base = eval(base, server)?;
            let key = property_key(eval(key, server)?.js());
            read(base, &key)?
        }
        Expr::IndexOf(target, args) => {
            let target = eval(target, server)?;
            if matches!(target.js(), Js::Undefined | Js::Null) {
                return Err(type_error_reading(target.js(), "indexOf"));
            }
            let args = args.iter().map(|a| eval(a, server)).collect::<Result<Vec<_>, _>>()?;
            Val::Own(index_of(&target, &args)?)
        }
        Expr::Not(x) => Val::Own(Js::Bool(!eval(x, server)?.js().truthy())),
        Expr::Neg(x) => Val::Own(Js::Num(-prim(eval(x, server)?.js()).num())),
        Expr::Plus(x) => Val::Own(Js::Num(prim(eval(x, server)?.js()).num())),
        Expr::And(a, b) => {
            let left = eval(a, server)?;
            if left.js().truthy() {
                eval(b, server)?
            } else {
                left
            }
        }
        Expr::Or(a, b) => {
            let left = eval(a, server)?;
            if left.js().truthy() {
                left
            } else {
                eval(b, server)?
            }
        }
        Expr::Bin(op, a, b) => {
            let (a, b) = (eval(a, server)?, eval(b, server)?);
            let result = match op {
                BinOp::StrictEq => strict_equals(&a, &b),
                BinOp::StrictNe => !strict_equals(&a, &b),
                BinOp::LooseEq => loose_equals(&a, &b),
                BinOp::LooseNe => !loose_equals(&a, &b),
                _ => compare(*op, a.js(), b.js()),
            };
            Val::Own(Js::Bool(result))
        }
    })
}
