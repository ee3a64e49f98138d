//! [`Shape`]: a field that should hold an object but, because the original validates
//! loosely, may hold anything.

use std::marker::PhantomData;

use serde::de::{self, value::MapAccessDeserializer, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::js::Js;

/// An object-typed field as received: absent, an object, or some other JSON value.
#[derive(Debug, Default, Clone)]
pub enum Shape<T> {
    #[default]
    Absent,
    Obj(T),
    /// null, an array, or a scalar.
    Other(Js),
}

impl<T> Shape<T> {
    pub fn as_obj(&self) -> Option<&T> {
        match self {
            Shape::Obj(t) => Some(t),
            _ => None,
        }
    }

    /// JS truthiness of the field.
    pub fn truthy(&self) -> bool {
        match self {
            Shape::Absent => false,
            Shape::Obj(_) => true,
            Shape::Other(v) => v.truthy(),
        }
    }

    /// `typeof` of the field.
    pub fn type_of(&self) -> &'static str {
        match self {
            Shape::Absent => "undefined",
            Shape::Obj(_) => "object",
            Shape::Other(v) => v.type_of(),
        }
    }
}

impl<T: EmptyValue> Shape<T> {
    /// The object, or an empty one when the field is absent or not an object.
    pub fn obj_or_empty(&self) -> &T {
        match self {
            Shape::Obj(t) => t,
            _ => T::empty(),
        }
    }
}

/// Types with a shared empty instance, read where a field is missing or malformed.
pub trait EmptyValue: 'static {
    fn empty() -> &'static Self;
}

/// Implements [`EmptyValue`] through a lazily built `Default` value.
#[macro_export]
macro_rules! empty_value {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::model::EmptyValue for $t {
            fn empty() -> &'static Self {
                static EMPTY: std::sync::LazyLock<$t> = std::sync::LazyLock::new(<$t>::default);
                &EMPTY
            }
        }
    )*};
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shape<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor(PhantomData))
    }
}

struct ShapeVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ShapeVisitor<T> {
    type Value = Shape<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Shape<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Shape::Obj)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Js>()? {
            items.push(item);
        }
        Ok(Shape::Other(Js::Arr(items)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Num(v as f64)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Num(v as f64)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Num(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::str(v)))
    }
    fn visit_unit<E>(self) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Null))
    }
    fn visit_none<E>(self) -> Result<Shape<T>, E> {
        Ok(Shape::Other(Js::Null))
    }
}
