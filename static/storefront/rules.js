/* couponrush demo storefront: how a campaign's or a coupon's richer rule reads (docs/api.md, Richer rules):
 * tiers (满减) as a ladder, with the tier a cart reaches and what is left to reach the next; free shipping; buy N
 * get M. Loaded before app.js, which calls window.couponrushRules. Every string a shopper reads goes through
 * gettext() (Django's JavaScript catalog, /i18n/js/, as in app.js).
 */
(function () {
  "use strict";

  var gettext = window.gettext || function (msgid) { return msgid; };
  var interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (all, name) { return String(values[name]); });
  };
  // Named values, then "%%" as "%" (Django's interpolate leaves it: "10%% off" would show both signs).
  function fmt(text, values) { return interpolate(text, values, true).replace(/%%/g, "%"); }

  // Amounts as whole hundredths, so that "what is left" is exact (the API's amounts have at most 2 decimals).
  function cents(text) { return Math.round(parseFloat(text) * 100); }
  function amount(hundredths) { return (hundredths / 100).toFixed(2); }

  function cap(item, money) {
    return item.max_discount
      ? fmt(gettext(" (at most %(amount)s)"), { amount: money(item.max_discount, item.currency) }) : "";
  }

  function tierText(tier, item, money) {
    return tier.percent
      ? fmt(gettext("Spend %(threshold)s, save %(percent)s%%"),
        { threshold: money(tier.threshold, item.currency), percent: parseFloat(tier.off) })
      : fmt(gettext("Spend %(threshold)s, save %(off)s"),
        { threshold: money(tier.threshold, item.currency), off: money(tier.off, item.currency) });
  }

  // The rule of a tiers, free shipping or buy N get M campaign or coupon; null for another kind.
  function dealText(item, money) {
    var min = parseFloat(item.min_spend) > 0
      ? fmt(gettext(" on orders of %(amount)s or more"), { amount: money(item.min_spend, item.currency) }) : "";
    if (item.discount_type === "tiers" && item.tiers && item.tiers.length) {
      return item.tiers.map(function (tier) { return tierText(tier, item, money); }).join(" · ") + cap(item, money);
    }
    if (item.discount_type === "free_shipping") return gettext("Free shipping") + cap(item, money) + min;
    if (item.discount_type === "buy_get") {
      return fmt(gettext("Buy %(buy)s, get %(get)s free"), { buy: item.buy_quantity, get: item.get_quantity }) +
        cap(item, money) + min;
    }
    return null;
  }

  // Where a cart of `total` (decimal text) stands on a tiers rule's ladder: {reached, next, left, text}, or null
  // for another rule. The tier is judged on the lines the rule covers; this demo's cart is all covered.
  function progress(item, total, money) {
    if (item.discount_type !== "tiers" || !item.tiers || !item.tiers.length) return null;
    var have = cents(total), reached = -1;
    item.tiers.forEach(function (tier, index) { if (have >= cents(tier.threshold)) reached = index; });
    var next = item.tiers[reached + 1] || null;
    var left = next ? amount(cents(next.threshold) - have) : null;
    var parts = [];
    if (reached >= 0) {
      parts.push(fmt(gettext("Your cart (%(total)s) reaches: %(tier)s."),
        { total: money(total, item.currency), tier: tierText(item.tiers[reached], item, money) }));
    }
    if (next) {
      parts.push(next.percent
        ? fmt(gettext("Spend %(left)s more to save %(percent)s%%."),
          { left: money(left, item.currency), percent: parseFloat(next.off) })
        : fmt(gettext("Spend %(left)s more to save %(off)s."),
          { left: money(left, item.currency), off: money(next.off, item.currency) }));
    } else {
      parts.push(gettext("The top tier is reached."));
    }
    return { reached: reached, next: next, left: left, text: parts.join(" ") };
  }

  window.couponrushRules = { dealText: dealText, progress: progress };
})();
