//! What LLM calls cost: [`Money`], an exact decimal dollar amount, and the
//! [`PriceTable`] that turns a call's `usage` into its `cost`.
//!
//! Costs are sums of tiny amounts (a token of a cheap model costs a few
//! hundred-billionths of a dollar), summed again per session and tenant and
//! compared against budgets, so they are kept as integers: [`Money`] counts
//! atto-dollars (10⁻¹⁸ $). A price per million tokens with up to 12 decimal
//! places times any token count is then exact, and so is every sum.

use std::collections::BTreeMap;
use std::fmt;
use std::iter::Sum;
use std::ops::Add;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use subs_protocol::LlmResponse;

/// Decimal digits kept after the dollar's point.
const SCALE: u32 = 18;
/// Atto-dollars per dollar.
const ONE_DOLLAR: i128 = 10i128.pow(SCALE);
/// Prices are per million tokens.
const TOKENS_PER_PRICE: i128 = 1_000_000;

/// An exact amount of dollars (to 10⁻¹⁸ $), written as a plain decimal
/// string (`"0.00042"`, `"12"`, never an exponent) — the form of
/// `LlmResponse.cost`.
///
/// Parse with [`str::parse`] (or [`Money::parse`]), add with `+` (saturating)
/// or [`checked_add`](Self::checked_add), compare with `<`/`>`, print with
/// `Display`. Serializes as its string; deserializes from a string or a JSON
/// or TOML number (a number is read by its shortest decimal form, so `0.15`
/// is exactly fifteen cents).
///
/// Every amount read from text or a number is zero or more: costs, prices
/// and budgets come from workers, decisions, config files and API bodies,
/// and a negative cost would take spend back, letting budgeted calls run
/// past their budget. Only arithmetic ([`checked_sub`](Self::checked_sub),
/// what is left of a budget) makes a negative amount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money {
    /// Atto-dollars: an integer, so sums never drift.
    atto: i128,
}

/// Why a text is not an amount of [`Money`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MoneyError {
    /// Not a plain decimal number (`"1.5"`, `"0.25"`, `"3"`).
    #[error("`{0}` is not a decimal amount of dollars (like `0.0042`)")]
    NotDecimal(String),
    /// More than 18 significant decimal places.
    #[error("`{0}` has more than 18 decimal places")]
    TooPrecise(String),
    /// Beyond about 10²⁰ dollars.
    #[error("`{0}` is too large an amount")]
    TooLarge(String),
    /// Below zero: no cost, price or budget is.
    #[error("`{0}` is negative; an amount of money is zero or more")]
    Negative(String),
}

impl Money {
    /// No money.
    pub const ZERO: Money = Money { atto: 0 };

    /// Reads a decimal dollar amount such as `"0.00042"` or `"3"`; a
    /// negative one is refused ([`MoneyError::Negative`]).
    pub fn parse(text: &str) -> Result<Money, MoneyError> {
        text.parse()
    }

    /// `dollars` whole dollars.
    pub fn from_dollars(dollars: i64) -> Money {
        Money { atto: i128::from(dollars) * ONE_DOLLAR }
    }

    /// The amount in atto-dollars (10⁻¹⁸ $).
    pub fn atto_dollars(self) -> i128 {
        self.atto
    }

    /// The amount of `atto` atto-dollars (10⁻¹⁸ $).
    pub fn from_atto_dollars(atto: i128) -> Money {
        Money { atto }
    }

    /// The sum, or `None` past about ±1.7·10²⁰ dollars.
    pub fn checked_add(self, other: Money) -> Option<Money> {
        self.atto.checked_add(other.atto).map(|atto| Money { atto })
    }

    /// The difference, or `None` past about ±1.7·10²⁰ dollars (for what is
    /// left of a budget).
    pub fn checked_sub(self, other: Money) -> Option<Money> {
        self.atto.checked_sub(other.atto).map(|atto| Money { atto })
    }

    /// Whether this is zero.
    pub fn is_zero(self) -> bool {
        self.atto == 0
    }
}

/// Adds two decimal dollar strings exactly (`add_cost("0.1", "0.2")` is
/// `"0.3"`): for summing `cost` per session and tenant. An amount that is
/// not a decimal is an error, so a bad cost is never silently counted as
/// zero.
pub fn add_cost(a: &str, b: &str) -> Result<String, MoneyError> {
    let sum = Money::parse(a)?.checked_add(Money::parse(b)?);
    sum.map(|m| m.to_string()).ok_or_else(|| MoneyError::TooLarge(format!("{a} + {b}")))
}

impl Add for Money {
    type Output = Money;

    /// Saturates rather than overflowing: no real cost comes near the limit.
    fn add(self, other: Money) -> Money {
        Money { atto: self.atto.saturating_add(other.atto) }
    }
}

impl Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Add::add)
    }
}

impl FromStr for Money {
    type Err = MoneyError;

    fn from_str(text: &str) -> Result<Money, MoneyError> {
        let not_decimal = || MoneyError::NotDecimal(text.to_owned());
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || digits.ends_with('.') {
            return Err(not_decimal());
        }
        let fraction = fraction.trim_end_matches('0');
        if fraction.len() > SCALE as usize {
            return Err(MoneyError::TooPrecise(text.to_owned()));
        }
        let too_large = || MoneyError::TooLarge(text.to_owned());
        let whole: i128 = whole.parse().map_err(|_| too_large())?;
        let mut fraction_atto: i128 =
            if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| not_decimal())? };
        fraction_atto *= 10i128.pow(SCALE - fraction.len() as u32);
        let atto = whole.checked_mul(ONE_DOLLAR).and_then(|w| w.checked_add(fraction_atto)).ok_or_else(too_large)?;
        // `-0` is zero, not a negative amount.
        if negative && atto != 0 {
            return Err(MoneyError::Negative(text.to_owned()));
        }
        Ok(Money { atto })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.atto < 0 { "-" } else { "" };
        let abs = self.atto.unsigned_abs();
        let one = ONE_DOLLAR.unsigned_abs();
        let (whole, fraction) = (abs / one, abs % one);
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let fraction = format!("{fraction:0width$}", width = SCALE as usize);
        write!(f, "{sign}{whole}.{}", fraction.trim_end_matches('0'))
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Money, D::Error> {
        struct MoneyVisitor;

        impl serde::de::Visitor<'_> for MoneyVisitor {
            type Value = Money;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an amount of dollars, as a decimal string or a number")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Money, E> {
                text.parse().map_err(E::custom)
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Money, E> {
                n.to_string().parse().map_err(E::custom)
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Money, E> {
                n.to_string().parse().map_err(E::custom)
            }

            // A float's `Display` is its shortest round-tripping decimal,
            // never an exponent: `0.15` reads as exactly 0.15.
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Money, E> {
                if !n.is_finite() {
                    return Err(E::custom(format!("{n} is not an amount of dollars")));
                }
                n.to_string().parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_any(MoneyVisitor)
    }
}

/// What one model charges, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input (prompt) tokens not read from a cache.
    pub input: Money,
    /// Per million output tokens, reasoning tokens included (providers
    /// count and bill them as output).
    pub output: Money,
    /// Per million input tokens read from the provider's prompt cache;
    /// omitted: the `input` price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Money>,
    /// Per million input tokens written to the prompt cache (Anthropic
    /// bills these apart); omitted: the `input` price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Money>,
}

impl Price {
    /// A price without cache rates, from decimal dollar strings; panics on
    /// a malformed literal, so it is for built-in tables and tests.
    pub fn per_million(input: &str, output: &str) -> Price {
        let money = |s: &str| s.parse::<Money>().unwrap_or_else(|e| panic!("price literal: {e}"));
        Price { input: money(input), output: money(output), cache_read: None, cache_write: None }
    }

    /// Sets the cache-read price (builder style).
    #[must_use]
    pub fn with_cache_read(mut self, cache_read: &str) -> Price {
        self.cache_read = cache_read.parse().ok();
        self
    }

    /// Sets the cache-write price (builder style).
    #[must_use]
    pub fn with_cache_write(mut self, cache_write: &str) -> Price {
        self.cache_write = cache_write.parse().ok();
        self
    }

    /// What `usage` costs at this price: exact for prices with up to 12
    /// decimal places, otherwise rounded half up to 10⁻¹⁸ $. `None` only
    /// when the token counts are absurd enough to overflow.
    pub fn cost(&self, usage: &TokenUsage) -> Option<Money> {
        let part = |tokens: u64, price: Money| i128::from(tokens).checked_mul(price.atto_dollars());
        let total = [
            part(usage.input, self.input)?,
            part(usage.output, self.output)?,
            part(usage.cache_read, self.cache_read.unwrap_or(self.input))?,
            part(usage.cache_write, self.cache_write.unwrap_or(self.input))?,
        ]
        .into_iter()
        .try_fold(0i128, i128::checked_add)?;
        let rounded = total.checked_add(TOKENS_PER_PRICE / 2)?.div_euclid(TOKENS_PER_PRICE);
        Some(Money::from_atto_dollars(rounded))
    }
}

/// Token counts of one call, by how they are billed, read from either
/// provider's `usage` object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens billed at the input price.
    pub input: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
}

impl TokenUsage {
    /// Every input token, however billed: what OpenAI reports as
    /// `prompt_tokens`, and OpenTelemetry's `gen_ai.usage.input_tokens`.
    pub fn input_total(&self) -> u64 {
        self.input.saturating_add(self.cache_read).saturating_add(self.cache_write)
    }

    /// Reads a `usage` object as OpenAI (`prompt_tokens`,
    /// `completion_tokens`, `prompt_tokens_details.cached_tokens`, the cached
    /// tokens being part of the prompt's) or Anthropic (`input_tokens`,
    /// `output_tokens`, `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`, each apart) sends it. `None` when it
    /// is neither.
    pub fn from_usage(usage: &Value) -> Option<TokenUsage> {
        let count = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
        let has = |key: &str| usage.get(key).is_some_and(Value::is_u64);
        if has("prompt_tokens") || has("completion_tokens") {
            let prompt = count(usage, "prompt_tokens");
            let cached = usage.get("prompt_tokens_details").map_or(0, |d| count(d, "cached_tokens")).min(prompt);
            Some(TokenUsage {
                input: prompt - cached,
                output: count(usage, "completion_tokens"),
                cache_read: cached,
                cache_write: 0,
            })
        } else if has("input_tokens") || has("output_tokens") {
            Some(TokenUsage {
                input: count(usage, "input_tokens"),
                output: count(usage, "output_tokens"),
                cache_read: count(usage, "cache_read_input_tokens"),
                cache_write: count(usage, "cache_creation_input_tokens"),
            })
        } else {
            None
        }
    }
}

/// Prices by full model name (`openai/gpt-4o-mini`).
///
/// A name is looked up as given, then without a trailing date
/// (`anthropic/claude-sonnet-4-5-20250929` → `anthropic/claude-sonnet-4-5`,
/// `openai/gpt-4o-2024-08-06` → `openai/gpt-4o`): providers answer with
/// dated snapshot names, which cost what their alias costs. Nothing else is
/// guessed: an unknown model has no price, and its calls no cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    /// Sorted, so listings come out the same every time.
    prices: BTreeMap<String, Price>,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> PriceTable {
        PriceTable::default()
    }

    /// The built-in prices: a few well-known OpenAI and Anthropic models at
    /// their published list prices when this table was written. Prices
    /// change; the config's `prices` overrides any entry.
    pub fn builtin() -> PriceTable {
        let mut table = PriceTable::new();
        for (model, input, output, cache_read) in [
            ("openai/gpt-4o", "2.50", "10.00", "1.25"),
            ("openai/gpt-4o-mini", "0.15", "0.60", "0.075"),
            ("openai/gpt-4.1", "2.00", "8.00", "0.50"),
            ("openai/gpt-4.1-mini", "0.40", "1.60", "0.10"),
            ("openai/gpt-4.1-nano", "0.10", "0.40", "0.025"),
            ("openai/gpt-5", "1.25", "10.00", "0.125"),
            ("openai/gpt-5-mini", "0.25", "2.00", "0.025"),
            ("openai/gpt-5-nano", "0.05", "0.40", "0.005"),
            ("openai/o3", "2.00", "8.00", "0.50"),
            ("openai/o4-mini", "1.10", "4.40", "0.275"),
        ] {
            table.insert(model, Price::per_million(input, output).with_cache_read(cache_read));
        }
        for (model, input, output, cache_read, cache_write) in [
            ("anthropic/claude-opus-4-1", "15", "75", "1.50", "18.75"),
            ("anthropic/claude-opus-4-0", "15", "75", "1.50", "18.75"),
            ("anthropic/claude-sonnet-4-5", "3", "15", "0.30", "3.75"),
            ("anthropic/claude-sonnet-4-0", "3", "15", "0.30", "3.75"),
            ("anthropic/claude-3-7-sonnet", "3", "15", "0.30", "3.75"),
            ("anthropic/claude-haiku-4-5", "1", "5", "0.10", "1.25"),
            ("anthropic/claude-3-5-haiku", "0.80", "4", "0.08", "1"),
        ] {
            let price = Price::per_million(input, output).with_cache_read(cache_read).with_cache_write(cache_write);
            table.insert(model, price);
        }
        table
    }

    /// Sets the price of `model` (a full `provider/model` name), replacing
    /// any it had.
    pub fn insert(&mut self, model: impl Into<String>, price: Price) {
        self.prices.insert(model.into(), price);
    }

    /// Every entry, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Price)> {
        self.prices.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The price of `model` (a full `provider/model` name): its own entry,
    /// else its undated alias's.
    pub fn get(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| self.prices.get(without_date(model)?))
    }

    /// What a call of `model` that used `usage` (either provider's shape)
    /// cost; `None` when the model has no price or the usage has no token
    /// counts — never a made-up zero.
    pub fn cost(&self, model: &str, usage: &Value) -> Option<Money> {
        self.get(model)?.cost(&TokenUsage::from_usage(usage)?)
    }

    /// What a reply to a call of `model` (a full `provider/model` name)
    /// that used `usage` cost: at `model`'s price, else at the price of the
    /// model the reply says answered (`answered`, the provider's own name,
    /// or a full name of `model`'s provider). `None` as for
    /// [`cost`](Self::cost).
    pub fn reply_cost(&self, model: &str, answered: &str, usage: &Value) -> Option<Money> {
        self.cost(model, usage).or_else(|| {
            let (provider, _) = model.split_once('/')?;
            let own = answered.strip_prefix(provider).and_then(|a| a.strip_prefix('/')).unwrap_or(answered);
            if own.is_empty() {
                return None;
            }
            self.cost(&format!("{provider}/{own}"), usage)
        })
    }

    /// Gives `response`, a reply to a call of `model` (a full
    /// `provider/model` name), its cost when it came without one: priced
    /// from its usage by [`reply_cost`](Self::reply_cost). A cost the reply
    /// states is kept; without usage or a price it stays absent.
    pub fn price_reply(&self, model: &str, response: &mut LlmResponse) {
        if response.cost.is_some() {
            return;
        }
        if let Some(usage) = &response.usage {
            response.cost = self.reply_cost(model, &response.model, usage).map(|m| m.to_string());
        }
    }
}

impl Extend<(String, Price)> for PriceTable {
    fn extend<I: IntoIterator<Item = (String, Price)>>(&mut self, entries: I) {
        self.prices.extend(entries);
    }
}

/// `name` without a trailing `-YYYYMMDD` or `-YYYY-MM-DD`.
fn without_date(name: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (rest, last) = name.rsplit_once('-')?;
    if last.len() == 8 && digits(last) {
        return Some(rest);
    }
    let (rest, month) = rest.rsplit_once('-')?;
    let (rest, year) = rest.rsplit_once('-')?;
    (year.len() == 4 && month.len() == 2 && last.len() == 2 && digits(year) && digits(month) && digits(last))
        .then_some(rest)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn money(s: &str) -> Money {
        s.parse().unwrap()
    }

    #[test]
    fn money_prints_plain_decimals_without_trailing_zeros() {
        for (text, printed) in [
            ("0", "0"),
            ("0.000", "0"),
            ("-0", "0"),
            ("12", "12"),
            ("+1.50", "1.5"),
            ("0.000000000000000001", "0.000000000000000001"),
            ("00042.4200", "42.42"),
            ("1.000000000000000000000", "1"),
        ] {
            assert_eq!(money(text).to_string(), printed, "{text}");
        }
    }

    #[test]
    fn money_rejects_what_is_not_a_plain_decimal() {
        for text in ["", ".", "1.", ".5", "1e-6", "0x10", "1,5", " 1", "--1", "NaN", "1.2.3", "-"] {
            assert!(matches!(Money::parse(text), Err(MoneyError::NotDecimal(_))), "{text:?}");
        }
        assert!(matches!(Money::parse("0.0000000000000000001"), Err(MoneyError::TooPrecise(_))));
        assert!(matches!(Money::parse("1000000000000000000000"), Err(MoneyError::TooLarge(_))));
    }

    #[test]
    fn no_amount_read_from_outside_is_negative_or_not_finite() {
        for text in ["-1500", "-0.000000000000000001", "-3"] {
            let refused = Money::parse(text).unwrap_err();
            assert!(matches!(refused, MoneyError::Negative(_)), "{text:?}: {refused:?}");
            assert!(refused.to_string().contains("negative"), "{refused}");
        }
        for number in [json!(-1), json!(-0.5), json!("-2")] {
            assert!(serde_json::from_value::<Money>(number.clone()).is_err(), "{number}");
        }
        // JSON has no NaN or infinity; TOML, which config files are, does.
        for number in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.25] {
            let read = serde::de::value::F64Deserializer::<serde::de::value::Error>::new(number);
            assert!(Money::deserialize(read).is_err(), "{number}");
        }
        assert_eq!(money("-0"), Money::ZERO, "minus zero is zero");
        // A configured price is refused the same way.
        let price = json!({"input": "-1", "output": "1"});
        let refused = serde_json::from_value::<Price>(price).unwrap_err().to_string();
        assert!(refused.contains("negative"), "{refused}");
        // Arithmetic alone makes a negative amount, and prints it.
        assert_eq!(money("1").checked_sub(money("3.25")).unwrap().to_string(), "-2.25");
    }

    #[test]
    fn sums_are_exact_where_floats_drift() {
        assert_eq!(add_cost("0.1", "0.2").unwrap(), "0.3");
        let mut total = Money::ZERO;
        for _ in 0..1000 {
            total = total + money("0.00000015");
        }
        assert_eq!(total.to_string(), "0.00015");
        assert_eq!([money("1"), money("0.5")].into_iter().sum::<Money>(), money("1.5"));
        assert!(money("0.3") > money("0.29999"));
        assert_eq!(money("1").checked_sub(money("1.25")).unwrap().to_string(), "-0.25");
        assert!(add_cost("1", "one").is_err());
        assert!(Money::from_atto_dollars(i128::MAX).checked_add(money("1")).is_none());
        assert_eq!(Money::from_atto_dollars(i128::MAX) + money("1"), Money::from_atto_dollars(i128::MAX));
    }

    #[test]
    fn money_serializes_as_a_string_and_reads_numbers_exactly() {
        assert_eq!(serde_json::to_value(money("0.075")).unwrap(), json!("0.075"));
        let read: Vec<Money> = serde_json::from_value(json!(["1.25", 3, 0.15, 0.1])).unwrap();
        assert_eq!(read, [money("1.25"), money("3"), money("0.15"), money("0.1")]);
        assert!(serde_json::from_value::<Money>(json!("abc")).is_err());
        assert!(serde_json::from_value::<Money>(json!(true)).is_err());
    }

    #[test]
    fn every_input_token_counts_in_the_input_total_in_both_namings() {
        let total = |usage: serde_json::Value| {
            let usage = TokenUsage::from_usage(&usage).unwrap();
            (usage.input_total(), usage.output)
        };
        assert_eq!(total(json!({"prompt_tokens": 12, "completion_tokens": 3})), (12, 3));
        let cached =
            json!({"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 5}});
        assert_eq!(total(cached), (12, 3));
        assert_eq!(total(json!({"input_tokens": 7, "output_tokens": 9})), (7, 9));
        let anthropic_cached = json!({"input_tokens": 7, "output_tokens": 9, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2});
        assert_eq!(total(anthropic_cached), (13, 9));
    }

    #[test]
    fn openai_usage_counts_cached_tokens_apart() {
        let usage = json!({"prompt_tokens": 1000, "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 400}});
        assert_eq!(
            TokenUsage::from_usage(&usage),
            Some(TokenUsage { input: 600, output: 50, cache_read: 400, cache_write: 0 })
        );
        let cost = PriceTable::builtin().cost("openai/gpt-4o-mini", &usage).unwrap();
        // 600 × 0.15 + 400 × 0.075 + 50 × 0.60 = 150 $·10⁻⁶ → 0.00015.
        assert_eq!(cost.to_string(), "0.00015");
    }

    #[test]
    fn anthropic_usage_bills_cache_writes_and_reads() {
        let usage = json!({"input_tokens": 10, "output_tokens": 20,
            "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 100});
        let cost = PriceTable::builtin().cost("anthropic/claude-sonnet-4-5-20250929", &usage).unwrap();
        // 10 × 3 + 20 × 15 + 1000 × 0.30 + 100 × 3.75 = 1005 → 0.001005.
        assert_eq!(cost.to_string(), "0.001005");
    }

    #[test]
    fn unknown_models_and_usages_have_no_cost_not_zero() {
        let table = PriceTable::builtin();
        let usage = json!({"prompt_tokens": 1, "completion_tokens": 1});
        assert_eq!(table.cost("openai/gpt-unknown", &usage), None);
        assert_eq!(table.cost("gpt-4o", &usage), None);
        assert_eq!(table.cost("openai/gpt-4o", &json!({"tokens": 3})), None);
        assert_eq!(table.cost("openai/gpt-4o", &json!({"prompt_tokens": 0})).unwrap(), Money::ZERO);
    }

    #[test]
    fn dated_names_cost_what_their_alias_costs_and_nothing_else_is_guessed() {
        let table = PriceTable::builtin();
        assert!(table.get("openai/gpt-4o-2024-08-06").is_some());
        assert!(table.get("anthropic/claude-haiku-4-5-20251001").is_some());
        assert!(table.get("openai/gpt-4o-audio-preview").is_none());
        assert!(table.get("openai/gpt-4o-2024-08").is_none());
        assert_eq!(without_date("a-2024-13-99"), Some("a"));
        assert_eq!(without_date("20240101"), None);
    }

    #[test]
    fn sub_atto_prices_round_half_up_and_huge_usage_is_no_cost() {
        let price = Price { input: Money::from_atto_dollars(1), ..Price::per_million("0", "0") };
        let cost = |n| price.cost(&TokenUsage { input: n, ..TokenUsage::default() }).unwrap();
        assert_eq!(cost(499_999).atto_dollars(), 0);
        assert_eq!(cost(500_000).atto_dollars(), 1);
        let huge = TokenUsage { output: u64::MAX, ..TokenUsage::default() };
        assert_eq!(Price::per_million("1000000000", "1000000000").cost(&huge), None);
    }
}
